-- The edition's function bodies are parsed under the caller's standard_conforming_strings
-- (a PL/pgSQL function when a session first calls it, a SQL function at every call): every
-- backslash they mean is in an E'' string, which reads the same under both settings. Each
-- check starts in a new session, so that no function was compiled under the other setting.
\set VERBOSITY terse
SELECT idempotency.key_lock_id('scope', 'key') AS lock_on \gset
\c
SET standard_conforming_strings = off;
SET escape_string_warning = off;
-- The lock hash of (scope, key): the same bytes, the 0 byte between scope and key included.
SELECT idempotency.key_lock_id('scope', 'key') = :lock_on AS same_lock;
SELECT outcome FROM idempotency.reserve('strings', 'k', retention => '1 hour');
SELECT idempotency.complete('strings', 'k', 200, '"done"');
SELECT outcome, response FROM idempotency.reserve('strings', 'k');
-- The settings read as durations: a retention over idempotency.max_retention is refused as
-- such (the value was read), not as an invalid value.
SET idempotency.max_retention = ' 2 h ';
SELECT outcome FROM idempotency.reserve('strings', 'long', retention => '3 hours');
RESET idempotency.max_retention;
\c
SET standard_conforming_strings = off;
SET escape_string_warning = off;
-- The partitions' bounds, read from their partition expressions.
SELECT count(*) AS not_done FROM idempotency.maintain() WHERE action IN ('skipped', 'failed');
SELECT count(*) > 0 AS some, bool_and(range_start IS NOT NULL AND range_end > range_start) AS bounds_read
  FROM idempotency.partitions WHERE NOT is_default;
SELECT idempotency.forget('strings', 'k');
