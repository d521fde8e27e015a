"""Every statement text the client sends, and nothing else.

The extension's calls are the texts of test/vectors/statements.json, the one list every client
sends, with psycopg's %s for its $n placeholders (tests/test_statements.py checks each text
against the list). A column the client reads as JSON arrives as text (response::text): the
client loads it itself, in the session's encoding (connection.load_json).
"""

# ---- the key calls ----

RESERVE = ("SELECT r.outcome::text, r.status_code, r.response::text, r.attempt, "
           "r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at "
           "FROM idempotency.reserve(%s, %s, %s::bytea, %s::interval, %s::interval, "
           "%s::interval) AS r")
# reserve, and the outcome 'new' opens the transaction itself, as BEGIN would; any other outcome
# leaves none open. A retry costs one round trip, a new key one fewer. Its row is RESERVE's.
RESERVE_BEGIN = ("SELECT r.outcome::text, r.status_code, r.response::text, r.attempt, "
                 "r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at "
                 "FROM idempotency.reserve_begin(%s, %s, %s::bytea, %s::interval, "
                 "%s::interval, %s::interval) AS r")
# The claim, one statement of the caller's (its text and its parameters as text, bound) and
# its answer in one call: on 'new' the statement ran and its result is the stored response.
# Its row is RESERVE's.
EXECUTE_ONCE = ("SELECT r.outcome::text, r.status_code, r.response::text, r.attempt, "
                "r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at "
                "FROM idempotency.execute_once(%s, %s, %s::bytea, %s, %s::text[], %s::integer, "
                "%s::interval, %s::interval, %s::interval) AS r")
COMPLETE = "SELECT idempotency.complete(%s, %s, %s::integer, %s::jsonb, %s::integer)"
FAIL = "SELECT idempotency.fail(%s, %s, %s::jsonb, %s::integer)"
# fail with the time of the failure added to the error document (poison-message records).
FAIL_STAMPED = ("SELECT idempotency.fail(%s, %s, %s::jsonb || pg_catalog.jsonb_build_object("
                "'failed_at', pg_catalog.now()), %s::integer)")
CHECKPOINT = "SELECT idempotency.checkpoint(%s, %s, %s, %s::integer)"
LOOKUP = ("SELECT state::text, status_code, response::text, request_hash, attempt, "
          "recovery_point, last_error::text, first_seen_at, completed_at, locked_until, "
          "expires_at FROM idempotency.lookup(%s, %s)")
FORGET = "SELECT idempotency.forget(%s, %s)"

# ---- consumers and streams ----

CLAIM_ONCE = "SELECT idempotency.claim_once(%s, %s, %s::interval, %s::interval)"
ACCEPT_BIGINT = "SELECT idempotency.accept(%s, %s, %s::bigint)"
ACCEPT_UUID = "SELECT idempotency.accept(%s, %s, %s::uuid)"
WATERMARK = "SELECT idempotency.watermark(%s, %s)::text"
NEXT_KEY = "SELECT idempotency.next_key(%s)::text"
EMIT = "SELECT idempotency.emit(%s, %s::jsonb)::text"

# ---- the server's extension version and edition (versions.py) ----

# The version of the extension created in the database (no row: none).
EXTENSION_VERSION = "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'idempotency'"
# The server's edition, its version, how it was installed and the functions the session may
# execute: one row whatever is installed.
EDITION = ("SELECT CASE WHEN e.extversion IS NULL AND m.version IS NULL THEN NULL WHEN EXISTS "
           "(SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang "
           "WHERE p.pronamespace = n.oid AND l.lanname = 'c') THEN 'extension' ELSE 'managed' END "
           "AS edition, COALESCE(e.extversion, m.version) AS version, CASE WHEN e.extversion IS "
           "NOT NULL THEN 'extension' WHEN m.version IS NOT NULL THEN 'script' END AS "
           "installed_as, COALESCE((SELECT pg_catalog.string_agg(DISTINCT p.proname::text, ' ' "
           "ORDER BY p.proname::text) FROM pg_catalog.pg_proc p WHERE p.pronamespace = n.oid AND "
           "pg_catalog.has_function_privilege(p.oid, 'EXECUTE')), '') AS functions FROM (SELECT "
           "pg_catalog.to_regnamespace('idempotency')::oid AS oid) AS n LEFT JOIN "
           "pg_catalog.pg_extension e ON e.extname = 'idempotency' CROSS JOIN LATERAL (SELECT "
           "pg_catalog.substring(pg_catalog.obj_description(n.oid, 'pg_namespace'), '^idempotency "
           "managed edition ([0-9][0-9A-Za-z.-]*)$') AS version) AS m")

# The texts above under their names in test/vectors/statements.json.
LISTED = {
    "reserve": RESERVE,
    "reserve_begin": RESERVE_BEGIN,
    "execute_once": EXECUTE_ONCE,
    "complete": COMPLETE,
    "fail": FAIL,
    "fail_stamped": FAIL_STAMPED,
    "checkpoint": CHECKPOINT,
    "lookup": LOOKUP,
    "forget": FORGET,
    "claim_once": CLAIM_ONCE,
    "accept_bigint": ACCEPT_BIGINT,
    "accept_uuid": ACCEPT_UUID,
    "watermark": WATERMARK,
    "next_key": NEXT_KEY,
    "emit": EMIT,
    "extension_version": EXTENSION_VERSION,
    "edition": EDITION,
}

# ---- not the extension's: transaction control and the outbox consumer's slot functions ----

BEGIN = "BEGIN"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
SLOT_EXISTS = "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s"
CREATE_SLOT = "SELECT pg_create_logical_replication_slot(%s, 'idempotency')"
ADVANCE_SLOT = "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)"


def peek_changes(options: int) -> str:
    """pg_logical_slot_peek_changes of a slot, up to a number of changes, with `options`
    plugin option texts (name, value, name, value, ...)."""
    return ("SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, %s"
            + ", %s" * options + ")")
