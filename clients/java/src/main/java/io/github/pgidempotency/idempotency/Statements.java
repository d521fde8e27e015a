package io.github.pgidempotency.idempotency;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The texts of every statement the client sends, in one place. Each text in {@link #LISTED} is
 * the one of test/vectors/statements.json under the same name, the list every client's tests
 * check against (StatementsTest: equal once runs of white space are folded and each $n is
 * JDBC's ?). Every value is a bound parameter; no value is ever written into a text.
 */
final class Statements {
  private Statements() {}

  static final String RESERVE =
      "SELECT r.outcome::text, r.status_code, r.response::text, r.attempt, r.recovery_point,"
          + " r.first_seen_at, r.locked_until, r.expires_at"
          + " FROM idempotency.reserve(?, ?, ?::bytea, ?::interval, ?::interval, ?::interval) AS r";
  static final String RESERVE_BEGIN =
      "SELECT r.outcome::text, r.status_code, r.response::text, r.attempt, r.recovery_point,"
          + " r.first_seen_at, r.locked_until, r.expires_at"
          + " FROM idempotency.reserve_begin(?, ?, ?::bytea, ?::interval, ?::interval,"
          + " ?::interval) AS r";
  static final String COMPLETE =
      "SELECT idempotency.complete(?, ?, ?::integer, ?::jsonb, ?::integer)";
  static final String FAIL = "SELECT idempotency.fail(?, ?, ?::jsonb, ?::integer)";
  static final String CHECKPOINT = "SELECT idempotency.checkpoint(?, ?, ?, ?::integer)";
  static final String LOOKUP =
      "SELECT state::text, status_code, response::text, request_hash, attempt, recovery_point,"
          + " last_error::text, first_seen_at, completed_at, locked_until, expires_at"
          + " FROM idempotency.lookup(?, ?)";
  static final String FORGET = "SELECT idempotency.forget(?, ?)";
  static final String EXECUTE_ONCE =
      "SELECT r.outcome::text, r.status_code, r.response::text, r.attempt, r.recovery_point,"
          + " r.first_seen_at, r.locked_until, r.expires_at"
          + " FROM idempotency.execute_once(?, ?, ?::bytea, ?, ?::text[], ?::integer, ?::interval,"
          + " ?::interval, ?::interval) AS r";
  static final String CLAIM_ONCE =
      "SELECT idempotency.claim_once(?, ?, ?::interval, ?::interval)";
  static final String ACCEPT_BIGINT = "SELECT idempotency.accept(?, ?, ?::bigint)";
  static final String ACCEPT_UUID = "SELECT idempotency.accept(?, ?, ?::uuid)";
  static final String WATERMARK = "SELECT idempotency.watermark(?, ?)::text";
  static final String NEXT_KEY = "SELECT idempotency.next_key(?)::text";
  static final String FINGERPRINT = "SELECT idempotency.fingerprint(?::jsonb, ?::text[])";

  /**
   * The server's edition, its version, how it was installed and the functions the session may
   * execute (read by {@link Versions}).
   */
  static final String EDITION =
      "SELECT CASE WHEN e.extversion IS NULL AND m.version IS NULL THEN NULL"
          + " WHEN EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l"
          + " ON l.oid = p.prolang WHERE p.pronamespace = n.oid AND l.lanname = 'c')"
          + " THEN 'extension' ELSE 'managed' END AS edition,"
          + " COALESCE(e.extversion, m.version) AS version,"
          + " CASE WHEN e.extversion IS NOT NULL THEN 'extension'"
          + " WHEN m.version IS NOT NULL THEN 'script' END AS installed_as,"
          + " COALESCE((SELECT pg_catalog.string_agg(DISTINCT p.proname::text, ' '"
          + " ORDER BY p.proname::text) FROM pg_catalog.pg_proc p WHERE p.pronamespace = n.oid"
          + " AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE')), '') AS functions"
          + " FROM (SELECT pg_catalog.to_regnamespace('idempotency')::oid AS oid) AS n"
          + " LEFT JOIN pg_catalog.pg_extension e ON e.extname = 'idempotency'"
          + " CROSS JOIN LATERAL (SELECT pg_catalog.substring(pg_catalog.obj_description(n.oid,"
          + " 'pg_namespace'), '^idempotency managed edition ([0-9][0-9A-Za-z.-]*)$') AS version)"
          + " AS m";

  /** The texts above under their names in test/vectors/statements.json. */
  static final Map<String, String> LISTED = listed(
      "reserve", RESERVE, "reserve_begin", RESERVE_BEGIN, "complete", COMPLETE, "fail", FAIL,
      "checkpoint", CHECKPOINT, "lookup", LOOKUP, "forget", FORGET, "claim_once", CLAIM_ONCE,
      "execute_once", EXECUTE_ONCE,
      "accept_bigint", ACCEPT_BIGINT, "accept_uuid", ACCEPT_UUID, "watermark", WATERMARK,
      "next_key", NEXT_KEY, "fingerprint", FINGERPRINT, "edition", EDITION);

  private static Map<String, String> listed(String... namesAndTexts) {
    Map<String, String> m = new LinkedHashMap<>();
    for (int i = 0; i < namesAndTexts.length; i += 2) m.put(namesAndTexts[i], namesAndTexts[i + 1]);
    return Map.copyOf(m);
  }

  /** Transaction control. */
  static final String COMMIT = "COMMIT";

  static final String ROLLBACK = "ROLLBACK";

  /**
   * A statement followed by COMMIT in one text: pgjdbc sends the statements of one prepared
   * text as a Parse, Bind and Execute each and one Sync, in one round trip, with the values
   * bound; after a failed statement the server skips the COMMIT.
   */
  static String thenCommit(String statement) {
    return statement + "; " + COMMIT;
  }
}
