"""Every statement text the client sends, and nothing else.

The extension's calls are the texts of test/vectors/statements.json, the one list every client
sends, with psycopg's %s for its $n placeholders, generated into spec_statements.py by
scripts/gen_spec.py and imported here (tests/test_statements.py checks each text against the
list). A column the client reads as JSON arrives as text (response::text): the
client loads it itself, in the session's encoding (connection.load_json).
"""

# ---- the extension's calls: generated from test/vectors/statements.json (scripts/gen_spec.py) ----

from .spec_statements import *  # noqa: F401,F403 (RESERVE, ..., LISTED)
from .spec_statements import LISTED  # noqa: F401 (named for readers and linters)

# ---- not the extension's: transaction control and the outbox consumer's slot functions ----

BEGIN = "BEGIN"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
# No value, no work: sent through psycopg2 (Django) so that psycopg2 opens the transaction.
NOTHING = "SELECT"
SLOT_EXISTS = "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s"
CREATE_SLOT = "SELECT pg_create_logical_replication_slot(%s, 'idempotency')"
ADVANCE_SLOT = "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)"


def peek_changes(options: int) -> str:
    """pg_logical_slot_peek_changes of a slot, up to a number of changes, with `options`
    plugin option texts (name, value, name, value, ...)."""
    return ("SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, %s"
            + ", %s" * options + ")")
