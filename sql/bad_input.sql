-- Bad input at the SQL level: NULL in every argument position, empty strings, the
-- 10 MB limit on stored responses and errors, invalid UTF-8, deeply nested JSON, huge exclude
-- lists. Each call gets a clear error or a documented result, and leaves the database as it
-- was: bad_input.try runs its statements in a subtransaction that it always rolls back, and
-- returns the last statement's first column ('ok: ...') or the error ('SQLSTATE: message').
\set VERBOSITY terse
CREATE TEMP TABLE bad_input_before AS SELECT * FROM idempotency.keys;
CREATE FUNCTION pg_temp.try(VARIADIC statements text[]) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    statement text;
    result text;
BEGIN
    BEGIN
        FOREACH statement IN ARRAY statements LOOP
            EXECUTE statement INTO result;
        END LOOP;
        RAISE SQLSTATE 'IKZZZ' USING MESSAGE = COALESCE(result, '<null>');  -- undo everything
    EXCEPTION
        WHEN SQLSTATE 'IKZZZ' THEN RETURN 'ok: ' || SQLERRM;
        WHEN OTHERS THEN RETURN SQLSTATE || ': ' || SQLERRM;
    END;
END
$$;

-- NULL in each argument position. reserve's request_hash, complete's response, fail's error,
-- checkpoint's recovery_point and every attempt may be NULL (documented: no hash check, a
-- NULL result, no fencing); every other NULL is refused with 22004.
SELECT pg_temp.try($$SELECT outcome::text FROM idempotency.reserve(NULL, 'k', NULL, '1 minute', '1 day', '0')$$) AS reserve_scope,
       pg_temp.try($$SELECT outcome::text FROM idempotency.reserve('bad_input', NULL, NULL, '1 minute', '1 day', '0')$$) AS reserve_key,
       pg_temp.try($$SELECT outcome::text FROM idempotency.reserve('bad_input', 'k', NULL, '1 minute', '1 day', '0')$$) AS reserve_request_hash;
SELECT pg_temp.try($$SELECT outcome::text FROM idempotency.reserve('bad_input', 'k', '\x01', NULL, '1 day', '0')$$) AS reserve_lock_ttl,
       pg_temp.try($$SELECT outcome::text FROM idempotency.reserve('bad_input', 'k', '\x01', '1 minute', NULL, '0')$$) AS reserve_retention,
       pg_temp.try($$SELECT outcome::text FROM idempotency.reserve('bad_input', 'k', '\x01', '1 minute', '1 day', NULL)$$) AS reserve_wait;
SELECT pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT 'done' FROM idempotency.complete(NULL, 'k', 200, '{}', 1)$$) AS complete_scope,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT 'done' FROM idempotency.complete('bad_input', NULL, 200, '{}', 1)$$) AS complete_key,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT 'done' FROM idempotency.complete('bad_input', 'k', NULL, '{}', 1)$$) AS complete_status_code;
SELECT pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT idempotency.complete('bad_input', 'k', 204, NULL, 1)$$,
                   $$SELECT outcome || ' ' || status_code || ' ' || (response IS NULL) FROM idempotency.reserve('bad_input', 'k')$$) AS complete_response,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT idempotency.complete('bad_input', 'k', 200, '{}', NULL)$$,
                   $$SELECT outcome || ' ' || status_code FROM idempotency.reserve('bad_input', 'k')$$) AS complete_attempt;
SELECT pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT 'done' FROM idempotency.fail(NULL, 'k', '{}', 1)$$) AS fail_scope,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT 'done' FROM idempotency.fail('bad_input', NULL, '{}', 1)$$) AS fail_key,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT idempotency.fail('bad_input', 'k', NULL, 1)$$,
                   $$SELECT state || ' ' || (last_error IS NULL) FROM idempotency.lookup('bad_input', 'k')$$) AS fail_error,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT idempotency.fail('bad_input', 'k', '{}', NULL)$$,
                   $$SELECT state FROM idempotency.lookup('bad_input', 'k')$$) AS fail_attempt;
SELECT pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT 'done' FROM idempotency.checkpoint(NULL, 'k', 'p', 1)$$) AS checkpoint_scope,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT 'done' FROM idempotency.checkpoint('bad_input', NULL, 'p', 1)$$) AS checkpoint_key,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT idempotency.checkpoint('bad_input', 'k', 'p', 1)$$,
                   $$SELECT idempotency.checkpoint('bad_input', 'k', NULL, 1)$$,
                   $$SELECT (recovery_point IS NULL)::text FROM idempotency.lookup('bad_input', 'k')$$) AS checkpoint_recovery_point,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT idempotency.checkpoint('bad_input', 'k', 'p', NULL)$$,
                   $$SELECT recovery_point FROM idempotency.lookup('bad_input', 'k')$$) AS checkpoint_attempt;
SELECT pg_temp.try($$SELECT count(*)::text FROM idempotency.lookup(NULL, 'k')$$) AS lookup_scope,
       pg_temp.try($$SELECT count(*)::text FROM idempotency.lookup('bad_input', NULL)$$) AS lookup_key,
       pg_temp.try($$SELECT idempotency.forget(NULL, 'k')::text$$) AS forget_scope,
       pg_temp.try($$SELECT idempotency.forget('bad_input', NULL)::text$$) AS forget_key;
-- fingerprint and key_time are STRICT: NULL in, NULL out.
SELECT idempotency.fingerprint(NULL::jsonb) IS NULL AS fingerprint_body,
       idempotency.fingerprint('{}'::jsonb, NULL) IS NULL AS fingerprint_exclude,
       idempotency.fingerprint(NULL::bytea) IS NULL AS fingerprint_bytea,
       idempotency.key_time(NULL) IS NULL AS key_time;
SELECT pg_temp.try($$SELECT encode(idempotency.fingerprint('{"a": 1}'::jsonb, ARRAY['a', NULL]), 'hex')$$) AS null_in_exclude;

-- Empty strings. scope and key must not be empty; an empty request hash, recovery point or
-- JSON string is a value like any other.
SELECT pg_temp.try($$SELECT outcome::text FROM idempotency.reserve('', 'k')$$) AS empty_scope,
       pg_temp.try($$SELECT outcome::text FROM idempotency.reserve('bad_input', '')$$) AS empty_key,
       pg_temp.try($$SELECT count(*)::text FROM idempotency.lookup('bad_input', '')$$) AS empty_lookup,
       pg_temp.try($$SELECT idempotency.forget('', 'k')::text$$) AS empty_forget;
SELECT pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k', '')$$,
                   $$SELECT outcome::text FROM idempotency.reserve('bad_input', 'k', '\x00')$$) AS empty_hash_then_other,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT idempotency.checkpoint('bad_input', 'k', '')$$,
                   $$SELECT '[' || recovery_point || ']' FROM idempotency.lookup('bad_input', 'k')$$) AS empty_recovery_point,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT idempotency.complete('bad_input', 'k', 200, '""')$$,
                   $$SELECT response::text FROM idempotency.reserve('bad_input', 'k')$$) AS empty_json_string;
SELECT pg_temp.try($$SELECT encode(idempotency.fingerprint('{"a": 1}'::jsonb, ARRAY['']), 'hex')$$) AS empty_exclude_path,
       pg_temp.try($$SELECT encode(idempotency.fingerprint('{"a": 1}'::jsonb, ARRAY['a.']), 'hex')$$) AS empty_path_segment,
       idempotency.fingerprint('""'::jsonb) = idempotency.fingerprint('""'::bytea) AS empty_json_string_hash,
       idempotency.key_time('') IS NULL AS key_time_empty;

-- Responses and errors are limited to 10 MB (10485760 bytes) as jsonb; larger ones are refused
-- with 54000 before anything is written. {"b": "<n x's>"} takes n + 17 bytes.
SELECT pg_temp.try($$SELECT idempotency.reserve('bad_input', 'big')$$,
                   $$SELECT idempotency.complete('bad_input', 'big', 200, jsonb_build_object('b', repeat('x', 10485743)))$$,
                   $$SELECT outcome || ' ' || octet_length(response::text) FROM idempotency.reserve('bad_input', 'big')$$) AS response_at_limit;
SELECT pg_temp.try($$SELECT idempotency.reserve('bad_input', 'big')$$,
                   $$SELECT idempotency.fail('bad_input', 'big', jsonb_build_object('b', repeat('x', 10485743)))$$,
                   $$SELECT state FROM idempotency.lookup('bad_input', 'big')$$) AS error_at_limit;
\set VERBOSITY default
BEGIN;
SELECT outcome FROM idempotency.reserve('bad_input', 'big');
SELECT idempotency.complete('bad_input', 'big', 200, jsonb_build_object('b', repeat('x', 10485744)));
ROLLBACK;
BEGIN;
SELECT outcome FROM idempotency.reserve('bad_input', 'big');
SELECT idempotency.fail('bad_input', 'big', jsonb_build_object('b', repeat('x', 20 * 1024 * 1024)));
ROLLBACK;
-- refused even without a claim: the size is checked first
SELECT idempotency.complete('bad_input', 'no-claim', 200, jsonb_build_object('b', repeat('x', 10485744)));
\set VERBOSITY terse

-- Invalid UTF-8 never reaches the extension: the server refuses it when the text value is
-- made (22021), in any argument, and so does the jsonb input (22P02 / 22P05).
SELECT pg_temp.try($$SELECT outcome::text FROM idempotency.reserve('bad_input', E'k\xff')$$) AS key_literal,
       pg_temp.try($$SELECT outcome::text FROM idempotency.reserve(convert_from('\xc328'::bytea, 'UTF8'), 'k')$$) AS scope_converted;
SELECT pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k')$$,
                   $$SELECT idempotency.checkpoint('bad_input', 'k', convert_from('\xe282'::bytea, 'UTF8'))$$) AS recovery_point,
       pg_temp.try($$SELECT idempotency.key_time(convert_from('\xf0908d'::bytea, 'UTF8'))::text$$) AS key_time;
SELECT pg_temp.try($$SELECT encode(idempotency.fingerprint(convert_from('\x22ff22'::bytea, 'UTF8')::jsonb), 'hex')$$) AS json_bytes,
       pg_temp.try($$SELECT encode(idempotency.fingerprint('"\ud800"'::jsonb), 'hex')$$) AS json_lone_surrogate,
       pg_temp.try($$SELECT encode(idempotency.fingerprint('"\u0000"'::jsonb), 'hex')$$) AS json_nul,
       pg_temp.try($$SELECT idempotency.reserve('bad_input', 'k' || chr(0))::text$$) AS nul_character;
-- The same bytes as bytea are just bytes.
SELECT length(idempotency.fingerprint('\xc328ff'::bytea)) AS bytea_fingerprint;

-- Deeply nested JSON: fingerprint accepts 1000 levels and refuses more with 54000; jsonb's own
-- parser refuses far deeper input with 54001 (stack depth). A stored response has no depth
-- limit of ours.
SELECT pg_temp.try($$SELECT length(idempotency.fingerprint((repeat('[', 1000) || repeat(']', 1000))::jsonb))::text$$) AS depth_1000,
       pg_temp.try($$SELECT length(idempotency.fingerprint((repeat('{"a":', 999) || '1' || repeat('}', 999))::jsonb, ARRAY[repeat('a.', 998) || 'a']))::text$$) AS depth_999_excluded;
SELECT pg_temp.try($$SELECT length(idempotency.fingerprint((repeat('[', 1001) || repeat(']', 1001))::jsonb))::text$$) AS depth_1001,
       pg_temp.try($$SELECT length(idempotency.fingerprint((repeat('{"a":', 5000) || '1' || repeat('}', 5000))::jsonb))::text$$) AS depth_5000;
SELECT pg_temp.try($$SELECT length(idempotency.fingerprint((repeat('[', 1000000) || repeat(']', 1000000))::jsonb))::text$$) AS depth_1000000;
SELECT pg_temp.try($$SELECT idempotency.reserve('bad_input', 'deep')$$,
                   $$SELECT idempotency.complete('bad_input', 'deep', 200, (repeat('[', 5000) || repeat(']', 5000))::jsonb)$$,
                   $$SELECT outcome || ' ' || octet_length(response::text) FROM idempotency.reserve('bad_input', 'deep')$$) AS deep_response;
-- The whole body is parsed before excludes apply: excluding the too deep member does not help.
SELECT pg_temp.try($$SELECT (idempotency.fingerprint(jsonb_build_object('a', 1, 'deep', (repeat('[', 2000) || repeat(']', 2000))::jsonb), ARRAY['deep'])
                             = idempotency.fingerprint('{"a": 1}'::jsonb))::text$$) AS deep_member_excluded;

-- Huge exclude lists: paths that match nothing change nothing; all of them are applied.
SELECT idempotency.fingerprint('{"a": 1, "b": {"c": 2}}'::jsonb, array_agg('p' || i))
       = idempotency.fingerprint('{"a": 1, "b": {"c": 2}}'::jsonb) AS no_match_100000
FROM generate_series(1, 100000) i;
SELECT idempotency.fingerprint('{"a": 1, "b": {"c": 2, "d": 3}}'::jsonb, array_agg('b.p' || i) || ARRAY['b.d'])
       = idempotency.fingerprint('{"a": 1, "b": {"c": 2}}'::jsonb) AS nested_match_in_100000
FROM generate_series(1, 100000) i;
-- (Linear in paths + members: about a second here; a scan per path took minutes.)
SELECT idempotency.fingerprint(jsonb_object_agg('k' || i, i), array_agg('k' || i) FILTER (WHERE i > 1))
       = idempotency.fingerprint('{"k1": 1}'::jsonb) AS drop_99999_of_100000_members
FROM generate_series(1, 100000) i;
SELECT pg_temp.try($$SELECT encode(idempotency.fingerprint('{"a": 1}'::jsonb, ARRAY[['a'], ['b']]), 'hex')$$) AS two_dimensional,
       pg_temp.try($$SELECT encode(idempotency.fingerprint('{"a": 1}'::jsonb, ARRAY['a..b']), 'hex')$$) AS empty_middle_segment;

-- Nothing above changed the key table, and no key lock is left.
SELECT (SELECT count(*) FROM (TABLE bad_input_before EXCEPT ALL TABLE idempotency.keys) gone) AS rows_gone,
       (SELECT count(*) FROM (TABLE idempotency.keys EXCEPT ALL TABLE bad_input_before) added) AS rows_added,
       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 478
          AND pid = pg_backend_pid()) AS key_locks;
DROP TABLE bad_input_before;
