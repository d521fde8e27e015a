"""Every statement text the client sends, and nothing else."""

# ---- the key calls ----

RESERVE = ("SELECT * FROM idempotency.reserve(%s, %s, %s, %s::interval, %s::interval, "
           "%s::interval)")
# reserve, and the outcome 'new' opens the transaction itself, as BEGIN would; any other outcome
# leaves none open. A retry costs one round trip, a new key one fewer.
RESERVE_BEGIN = ("SELECT * FROM idempotency.reserve_begin(%s, %s, %s, %s::interval, "
                 "%s::interval, %s::interval)")
COMPLETE = "SELECT idempotency.complete(%s, %s, %s, %s, %s)"
# complete and COMMIT in one simple query (sent through a psycopg.ClientCursor): one round
# trip. A failed complete skips the COMMIT and leaves the transaction failed, for the caller to
# roll back.
COMPLETE_COMMIT = COMPLETE + "; COMMIT"
FAIL = "SELECT idempotency.fail(%s, %s, %s, %s)"
# fail with the time of the failure added to the error document (poison-message records).
FAIL_STAMPED = ("SELECT idempotency.fail(%s, %s, %s::jsonb || pg_catalog.jsonb_build_object("
                "'failed_at', pg_catalog.now()), %s)")
CHECKPOINT = "SELECT idempotency.checkpoint(%s, %s, %s, %s)"
LOOKUP = "SELECT * FROM idempotency.lookup(%s, %s)"

# ---- consumers and streams ----

CLAIM_ONCE = "SELECT idempotency.claim_once(%s, %s, %s::interval, %s::interval)"
ACCEPT_BIGINT = "SELECT idempotency.accept(%s, %s, %s::bigint)"
ACCEPT_UUID = "SELECT idempotency.accept(%s, %s, %s::uuid)"
WATERMARK = "SELECT idempotency.watermark(%s, %s)::text"
NEXT_KEY = "SELECT idempotency.next_key(%s)"
EMIT = "SELECT idempotency.emit(%s, %s)::text"

# ---- not the extension's: transaction control and the outbox consumer's slot functions ----

BEGIN = "BEGIN"
ROLLBACK = "ROLLBACK"
SLOT_EXISTS = "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s"
CREATE_SLOT = "SELECT pg_create_logical_replication_slot(%s, 'idempotency')"
ADVANCE_SLOT = "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)"


def peek_changes(options: int) -> str:
    """pg_logical_slot_peek_changes of a slot, up to a number of changes, with `options`
    plugin option texts (name, value, name, value, ...)."""
    return ("SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, %s"
            + ", %s" * options + ")")
