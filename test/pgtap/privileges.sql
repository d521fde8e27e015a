-- Least privilege: the roles of docs/operations.md "Roles and privileges" can do what it says
-- and nothing more, and a hostile search_path or a shadowing operator / function in a schema
-- another role controls does not change what the extension's functions do.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off
BEGIN;
CREATE EXTENSION IF NOT EXISTS idempotency;
SELECT plan(88);

-- Roles as README documents them (names unique to this test; rolled back at the end).
CREATE ROLE idem_priv_app NOLOGIN;
CREATE ROLE idem_priv_ops NOLOGIN;
CREATE ROLE idem_priv_nobody NOLOGIN;
CREATE ROLE idem_priv_evil NOLOGIN;

GRANT USAGE ON SCHEMA idempotency TO idem_priv_app;
GRANT EXECUTE ON FUNCTION
    idempotency.reserve(text, text, bytea, interval, interval, interval),
    idempotency.reserve_begin(text, text, bytea, interval, interval, interval),
    idempotency.complete(text, text, integer, jsonb, integer),
    idempotency.fail(text, text, jsonb, integer),
    idempotency.checkpoint(text, text, text, integer),
    idempotency.claim_once(text, text, interval, interval),
    idempotency.execute_once(text, text, bytea, text, text[], integer, interval, interval, interval),
    idempotency.lookup(text, text),
    idempotency.next_key(text),
    idempotency.accept(text, text, bigint),
    idempotency.accept(text, text, uuid),
    idempotency.watermark(text, text),
    idempotency.emit(text, jsonb)
TO idem_priv_app;

GRANT USAGE ON SCHEMA idempotency TO idem_priv_ops;
GRANT EXECUTE ON FUNCTION
    idempotency.lookup(text, text),
    idempotency.forget(text, text),
    idempotency.maintain(),
    idempotency.create_stream(text, integer),
    idempotency.drop_stream(text),
    idempotency.set_watermark(text, text, bigint),
    idempotency.set_watermark(text, text, uuid),
    idempotency.drop_consumer(text),
    idempotency.stats_counters(),
    idempotency.stats_reset()
TO idem_priv_ops;
GRANT SELECT ON idempotency.in_flight, idempotency.abandoned, idempotency.partitions,
    idempotency.stats, idempotency.watermarks, idempotency.maintenance_runs, idempotency.metrics,
    idempotency.key_locks, idempotency.stats_hourly, idempotency.stats_daily,
    idempotency.failed_keys
TO idem_priv_ops;

-- idem_priv.as_<role>(sql, search_path): runs sql as that role (a SECURITY DEFINER function
-- owned by it) and returns its first column as text, or 'ERROR <sqlstate>'.
CREATE SCHEMA idem_priv;
DO $$
DECLARE r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['app', 'ops', 'nobody', 'evil'] LOOP
        EXECUTE pg_catalog.format($f$
            CREATE FUNCTION idem_priv.as_%1$s(sql text, path text DEFAULT NULL) RETURNS text
            LANGUAGE plpgsql SECURITY DEFINER AS $b$
            DECLARE
                result text;
                saved text := pg_catalog.current_setting('search_path');
            BEGIN
                IF path IS NOT NULL THEN
                    PERFORM pg_catalog.set_config('search_path', path, true);
                END IF;
                EXECUTE sql INTO result;
                PERFORM pg_catalog.set_config('search_path', saved, true);
                RETURN COALESCE(result, '<null>');
            EXCEPTION WHEN OTHERS THEN
                RETURN 'ERROR ' || SQLSTATE;
            END
            $b$;
            ALTER FUNCTION idem_priv.as_%1$s(text, text) OWNER TO idem_priv_%1$s;
        $f$, r);
    END LOOP;
END
$$;

-- A role that owns a schema of its own and plants look-alikes in it: operators for the
-- comparisons the extension's SQL makes, functions named like built-ins, a decoy keys table.
-- Each logs its call; a hijack would show in idem_priv_evil.calls.
CREATE SCHEMA idem_priv_evil AUTHORIZATION idem_priv_evil;
SET ROLE idem_priv_evil;
GRANT USAGE ON SCHEMA idem_priv_evil TO PUBLIC;
CREATE TABLE idem_priv_evil.calls (what text);
GRANT INSERT, SELECT ON idem_priv_evil.calls TO PUBLIC;
CREATE TABLE idem_priv_evil.keys (scope text, key text, state text, attempt integer);
GRANT ALL ON idem_priv_evil.keys TO PUBLIC;
CREATE FUNCTION idem_priv_evil.text_eq(a text, b text) RETURNS boolean
    LANGUAGE plpgsql AS $$BEGIN INSERT INTO idem_priv_evil.calls VALUES ('text =');
    RETURN true; END$$;
CREATE OPERATOR idem_priv_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = idem_priv_evil.text_eq);
CREATE FUNCTION idem_priv_evil.ts_cmp(a timestamptz, b timestamptz) RETURNS boolean
    LANGUAGE plpgsql AS $$BEGIN INSERT INTO idem_priv_evil.calls VALUES ('timestamptz cmp');
    RETURN true; END$$;
CREATE OPERATOR idem_priv_evil.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = idem_priv_evil.ts_cmp);
CREATE OPERATOR idem_priv_evil.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = idem_priv_evil.ts_cmp);
CREATE OPERATOR idem_priv_evil.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = idem_priv_evil.ts_cmp);
CREATE OPERATOR idem_priv_evil.= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = idem_priv_evil.ts_cmp);
CREATE FUNCTION idem_priv_evil.now() RETURNS timestamptz
    LANGUAGE plpgsql AS $$BEGIN INSERT INTO idem_priv_evil.calls VALUES ('now()');
    RETURN '2000-01-01'; END$$;
CREATE FUNCTION idem_priv_evil.jsonb_eq(a jsonb, b jsonb) RETURNS boolean
    LANGUAGE plpgsql AS $$BEGIN INSERT INTO idem_priv_evil.calls VALUES ('jsonb_eq');
    RETURN true; END$$;
CREATE OPERATOR idem_priv_evil.= (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = idem_priv_evil.jsonb_eq);
RESET ROLE;

\set hostile 'idem_priv_evil, pg_catalog, public'

-- The trap is live: unqualified SQL under this search_path does reach the look-alikes.
SELECT is(idem_priv.as_app($$SELECT ('x'::text = 'y'::text)::text$$, :'hostile'), 'true',
    'control: under the hostile search_path an unqualified = is the planted operator');
SELECT is(idem_priv.as_app($$SELECT now()::date::text$$, :'hostile'), '2000-01-01',
    'control: under the hostile search_path an unqualified now() is the planted function');
TRUNCATE idem_priv_evil.calls;

-- First use of the lifecycle in this backend happens under the hostile search_path (the
-- saved plans are prepared here), then the same calls run again under a normal one.
SELECT is(idem_priv.as_app($$SELECT outcome || '/' || attempt FROM idempotency.reserve('priv', 'h1')$$, :'hostile'),
    'new/1', 'hostile path: reserve claims a new key');
SELECT is(idem_priv.as_app($$SELECT 'done' FROM idempotency.complete('priv', 'h1', 201, '{"n": 1}')$$, :'hostile'),
    'done', 'hostile path: complete stores the result');
SELECT is(idem_priv.as_app($$SELECT outcome || '/' || status_code || '/' || response FROM idempotency.reserve('priv', 'h1')$$, :'hostile'),
    'replay/201/{"n": 1}', 'hostile path: reserve replays the stored response');
SELECT is(idem_priv.as_app($$SELECT 'done' FROM idempotency.complete('priv', 'h1', 201, '{"n": 2}')$$, :'hostile'),
    'ERROR IK002', 'hostile path: a different result is still refused (jsonb equality not hijacked)');
SELECT is(idem_priv.as_app($$SELECT outcome || '/' || status_code FROM idempotency.reserve_begin('priv', 'h1')$$, :'hostile'),
    'replay/201', 'hostile path: reserve_begin replays the stored response');
SELECT is(idem_priv.as_app($$SELECT outcome::text FROM idempotency.reserve('priv', 'h1', '\x01'::bytea)$$, :'hostile'),
    'replay', 'hostile path: no request hash stored, none compared');
SELECT is(idem_priv.as_app($$SELECT outcome || '/' || attempt FROM idempotency.reserve('priv', 'h2', '\x02'::bytea)$$, :'hostile'),
    'new/1', 'hostile path: reserve of another key');
SELECT is(idem_priv.as_app($$SELECT outcome::text FROM idempotency.reserve('priv', 'h2', '\x03'::bytea)$$, :'hostile'),
    'mismatch', 'hostile path: a different request hash is a mismatch');
SELECT is(idem_priv.as_app($$SELECT 'done' FROM idempotency.fail('priv', 'h2', '{"e": 1}', 1)$$, :'hostile'),
    'done', 'hostile path: fail releases the claim');
SELECT is(idem_priv.as_app($$SELECT outcome || '/' || attempt FROM idempotency.reserve('priv', 'h2', '\x02'::bytea)$$, :'hostile'),
    'new/2', 'hostile path: the failed key is taken over with attempt 2');
SELECT is(idem_priv.as_app($$SELECT 'done' FROM idempotency.checkpoint('priv', 'h2', 'step-1', 2)$$, :'hostile'),
    'done', 'hostile path: checkpoint');
SELECT is(idem_priv.as_app($$SELECT state || '/' || attempt || '/' || recovery_point FROM idempotency.lookup('priv', 'h2')$$, :'hostile'),
    'processing/2/step-1', 'hostile path: lookup');
SELECT is(idem_priv.as_app($$SELECT 'done' FROM idempotency.complete('priv', 'h2', 200, NULL, 1)$$, :'hostile'),
    'ERROR IK001', 'hostile path: a stale attempt is refused');
SELECT is(idem_priv.as_ops($$SELECT idempotency.forget('priv', 'h2')::text$$, :'hostile'),
    'true', 'hostile path: forget');
SELECT is(idem_priv.as_app($$SELECT count(*)::text FROM idempotency.lookup('priv', 'h2')$$, :'hostile'),
    '0', 'hostile path: the forgotten key is gone');
SELECT is(idem_priv.as_app($$SELECT idempotency.claim_once('priv', 'c1')::text$$, :'hostile'),
    'true', 'hostile path: claim_once applies a new message key');
SELECT is(idem_priv.as_app($$SELECT idempotency.claim_once('priv', 'c1')::text$$, :'hostile'),
    'false', 'hostile path: claim_once of a completed key is a redelivery');
SELECT is(idem_priv.as_app($$SELECT idempotency.claim_once('priv', 'h1')::text$$, :'hostile'),
    'false', 'hostile path: claim_once of a key complete stored');
SELECT is(idem_priv.as_app($$SELECT outcome || '/' || status_code || '/' || response FROM idempotency.execute_once('priv', 'e1', NULL, 'SELECT $1::integer AS n', ARRAY['5'])$$, :'hostile'),
    'new/201/{"n": 5}', 'hostile path: execute_once runs its statement and stores its row');
SELECT is(idem_priv.as_app($$SELECT outcome || '/' || status_code || '/' || response FROM idempotency.execute_once('priv', 'e1', NULL, 'SELECT $1::integer AS n', ARRAY['6'])$$, :'hostile'),
    'replay/201/{"n": 5}', 'hostile path: execute_once replays the stored response');
SELECT is(idem_priv.as_app($$SELECT outcome::text FROM idempotency.execute_once('priv', 'e2', NULL, 'SELECT count(*) FROM idempotency.keys')$$),
    'ERROR 42501', 'application: execute_once''s statement runs as the caller, who may not read idempotency.keys');
-- Streams, watermarks, the outbox and maintenance under the hostile search_path.
SELECT 'idem_priv_' || pg_backend_pid() AS stream \gset
SELECT is(idem_priv.as_ops(format($$SELECT 'done' FROM idempotency.create_stream(%L)$$, :'stream'), :'hostile'),
    'done', 'hostile path: create_stream (operator)');
SELECT is(idem_priv.as_app(format($$SELECT (idempotency.next_key(%1$L) < idempotency.next_key(%1$L))::text$$, :'stream'), :'hostile'),
    'true', 'hostile path: next_key (application) increases');
SELECT is(idem_priv.as_app($$SELECT idempotency.accept('idem_priv', 'p0', 5)::text$$, :'hostile'),
    'true', 'hostile path: accept a new position');
SELECT is(idem_priv.as_app($$SELECT idempotency.accept('idem_priv', 'p0', 5)::text || idempotency.accept('idem_priv', 'p0', 4)::text$$, :'hostile'),
    'falsefalse', 'hostile path: accept refuses a duplicate and an older position');
SELECT is(idem_priv.as_app($$SELECT idempotency.watermark('idem_priv', 'p0')::text$$, :'hostile'),
    '5', 'hostile path: watermark');
SELECT is(idem_priv.as_app($$SELECT idempotency.accept('idem_priv', 'p1', '00000000-0000-0000-0000-000000000002'::uuid)::text$$, :'hostile'),
    'true', 'hostile path: accept a 128-bit position');
SELECT is(idem_priv.as_app($$SELECT (idempotency.emit('idem_priv', '{"a": 1}') IS NOT NULL)::text$$, :'hostile'),
    'true', 'hostile path: emit (application)');
SELECT matches(idem_priv.as_ops($$SELECT count(*)::text FROM idempotency.maintain()$$, :'hostile'),
    '^[0-9]+$', 'hostile path: maintain (operator)');
SELECT is(idem_priv.as_ops($$SELECT (SELECT count(*) FROM idempotency.in_flight) || '/' || (SELECT count(*) FROM idempotency.abandoned)
    || '/' || (SELECT count(*) FROM idempotency.watermarks WHERE consumer OPERATOR(pg_catalog.=) 'idem_priv') || '/' || (SELECT count(*) FROM idempotency.stats)
    || '/' || (SELECT count(*) > 0 FROM idempotency.partitions)$$, :'hostile'),
    (SELECT (SELECT count(*) FROM idempotency.in_flight) || '/' || (SELECT count(*) FROM idempotency.abandoned) || '/2/1/true'),
    'hostile path: the operator views show what the owner sees');
SELECT is((SELECT count(*) FROM idem_priv_evil.calls), 0::bigint,
    'no planted operator or function was called by the extension');
SELECT is((SELECT count(*) FROM idem_priv_evil.keys), 0::bigint, 'the decoy keys table is untouched');
SELECT is((SELECT string_agg(key || ':' || state || ':' || attempt, ',' ORDER BY key)
           FROM idempotency.keys WHERE scope = 'priv'),
    'c1:completed:1,e1:completed:1,h1:completed:1', 'the real table holds exactly what the calls did');

-- The same calls under a normal search_path behave the same.
SELECT is(idem_priv.as_app($$SELECT outcome || '/' || status_code || '/' || response FROM idempotency.reserve('priv', 'h1')$$),
    'replay/201/{"n": 1}', 'normal path: replay');
SELECT is(idem_priv.as_app($$SELECT outcome || '/' || attempt FROM idempotency.reserve('priv', 'n1')$$),
    'new/1', 'normal path: reserve');
SELECT is(idem_priv.as_app($$SELECT 'done' FROM idempotency.complete('priv', 'n1', 200, '[]')$$),
    'done', 'normal path: complete');
SELECT is(idem_priv.as_app($$SELECT length(idempotency.fingerprint('{"a": 1}'::jsonb))::text$$),
    '32', 'the application role can fingerprint (EXECUTE is public; USAGE on the schema suffices)');
SELECT is(idem_priv.as_app($$SELECT (idempotency.key_time(idempotency.uuidv7()::text) IS NOT NULL)::text$$),
    'true', 'the application role can make keys and read their time');

-- The application role cannot reach the tables, and cannot forget keys.
SELECT is(idem_priv.as_app($$SELECT count(*)::text FROM idempotency.keys$$), 'ERROR 42501',
    'application: SELECT on idempotency.keys is denied');
SELECT is(idem_priv.as_app($$SELECT count(*)::text FROM idempotency.keys_default$$), 'ERROR 42501',
    'application: SELECT on the default partition is denied');
SELECT is(idem_priv.as_app($$INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, expires_at)
    VALUES ('priv', 'forged', 'completed', 1, now(), now() + interval '1 day') RETURNING 'inserted'$$), 'ERROR 42501',
    'application: INSERT into idempotency.keys is denied');
SELECT is(idem_priv.as_app($$UPDATE idempotency.keys SET status_code = 500 RETURNING 'updated'$$), 'ERROR 42501',
    'application: UPDATE of idempotency.keys is denied');
SELECT is(idem_priv.as_app($$DELETE FROM idempotency.keys RETURNING 'deleted'$$), 'ERROR 42501',
    'application: DELETE from idempotency.keys is denied');
SELECT is(idem_priv.as_app($$TRUNCATE idempotency.keys_default$$), 'ERROR 42501',
    'application: TRUNCATE is denied');
SELECT is(idem_priv.as_app($$SELECT idempotency.forget('priv', 'n1')::text$$), 'ERROR 42501',
    'application: forget is an operator''s call');
SELECT is(idem_priv.as_app($$SELECT count(*)::text FROM idempotency.maintain()$$), 'ERROR 42501',
    'application: maintain is an operator''s call');
SELECT is(idem_priv.as_app($$SELECT 'done' FROM idempotency.create_stream('idem_priv_x')$$), 'ERROR 42501',
    'application: create_stream is an operator''s call');
SELECT is(idem_priv.as_app($$SELECT count(*)::text FROM idempotency.in_flight$$), 'ERROR 42501',
    'application: the operator views are denied');
SELECT is(idem_priv.as_app($$SELECT count(*)::text FROM idempotency.streams$$)
          || ' ' || idem_priv.as_app($$SELECT count(*)::text FROM idempotency.consumer_positions$$)
          || ' ' || idem_priv.as_app($$UPDATE idempotency.consumer_positions SET position = NULL RETURNING 'x'$$),
    'ERROR 42501 ERROR 42501 ERROR 42501', 'application: streams and consumer_positions are denied');

-- The operator role: lookup and forget, nothing that claims keys, no direct table access.
SELECT is(idem_priv.as_ops($$SELECT state || '/' || status_code FROM idempotency.lookup('priv', 'n1')$$),
    'completed/200', 'operator: lookup');
SELECT is(idem_priv.as_ops($$SELECT outcome::text FROM idempotency.reserve('priv', 'o1')$$), 'ERROR 42501',
    'operator: reserve is denied');
SELECT is(idem_priv.as_ops($$SELECT outcome::text FROM idempotency.reserve_begin('priv', 'o1')$$), 'ERROR 42501',
    'operator: reserve_begin is denied');
SELECT is(idem_priv.as_ops($$SELECT idempotency.claim_once('priv', 'o1')::text$$), 'ERROR 42501',
    'operator: claim_once is denied');
SELECT is(idem_priv.as_ops($$SELECT outcome::text FROM idempotency.execute_once('priv', 'o1', NULL, 'SELECT 1')$$), 'ERROR 42501',
    'operator: execute_once is denied');
SELECT is(idem_priv.as_ops($$SELECT 'done' FROM idempotency.complete('priv', 'n1', 200, '[]')$$), 'ERROR 42501',
    'operator: complete is denied');
SELECT is(idem_priv.as_ops($$SELECT count(*)::text FROM idempotency.keys$$), 'ERROR 42501',
    'operator: SELECT on idempotency.keys is denied');
SELECT is(idem_priv.as_ops($$SELECT idempotency.forget('priv', 'n1')::text$$), 'true', 'operator: forget');
SELECT is(idem_priv.as_ops($$SELECT idempotency.next_key('idem_priv_x')::text$$)
          || ' ' || idem_priv.as_ops($$SELECT idempotency.emit('idem_priv', '{}')::text$$)
          || ' ' || idem_priv.as_ops($$SELECT idempotency.accept('idem_priv', 'p0', 9)::text$$),
    'ERROR 42501 ERROR 42501 ERROR 42501', 'operator: next_key, emit and accept are the application''s');

-- Watermarks: the application moves them forwards only (accept); rewinding or removing a
-- consumer is the operator's.
SELECT is(idem_priv.as_app($$SELECT 'done' FROM idempotency.set_watermark('idem_priv', 'p0', 1)$$)
          || ' ' || idem_priv.as_app($$SELECT 'done' FROM idempotency.set_watermark('idem_priv', 'p0', '00000000-0000-0000-0000-000000000001'::uuid)$$)
          || ' ' || idem_priv.as_app($$SELECT idempotency.drop_consumer('idem_priv')::text$$),
    'ERROR 42501 ERROR 42501 ERROR 42501', 'application: set_watermark and drop_consumer are the operator''s');
SELECT is(idem_priv.as_ops($$SELECT 'done' FROM idempotency.set_watermark('idem_priv', 'p0', 1)$$)
          || ' ' || idem_priv.as_ops($$SELECT watermark::text FROM idempotency.watermarks WHERE consumer = 'idem_priv' AND partition = 'p0'$$),
    'done 1', 'operator: set_watermark moves a watermark backwards');
SELECT is(idem_priv.as_ops($$SELECT 'done' FROM idempotency.set_watermark('idem_priv_ops', 'p0', '00000000-0000-0000-0000-000000000001'::uuid)$$),
    'ERROR 42704', 'operator: set_watermark of an unknown consumer is refused');
SELECT is(idem_priv.as_ops($$SELECT idempotency.drop_consumer('idem_priv')::text$$)
          || ' ' || idem_priv.as_ops($$SELECT count(*)::text FROM idempotency.watermarks WHERE consumer = 'idem_priv'$$),
    '2 0', 'operator: drop_consumer removes both partitions'' watermarks');

SELECT is(idem_priv.as_ops($$SELECT (count(*) >= 0)::text FROM idempotency.maintenance_runs$$)
          || ' ' || idem_priv.as_app($$SELECT count(*)::text FROM idempotency.maintenance_runs$$)
          || ' ' || idem_priv.as_ops($$SELECT count(*)::text FROM idempotency.maintenance_log$$),
    'true ERROR 42501 ERROR 42501', 'maintenance_runs: the operator reads it, the application does not, nobody reads the table');

SELECT is(idem_priv.as_ops($$SELECT (count(*) > 10)::text FROM idempotency.metrics$$)
          || ' ' || idem_priv.as_app($$SELECT count(*)::text FROM idempotency.metrics$$),
    'true ERROR 42501', 'metrics: the operator reads it, the application does not');

-- Key locks held now, counters per hour and day (0.3.0). stats_hourly and stats_daily call
-- stats_counters(), and a view's reader needs EXECUTE on the functions it calls: the
-- operator has it (as for stats and metrics).
SELECT is(idem_priv.as_ops($$SELECT count(*)::text FROM idempotency.key_locks
                             WHERE lock_id = idempotency.key_lock_id('priv', 'h1')
                               AND pid = pg_backend_pid()$$),
    '1', 'operator: key_locks shows the key lock this transaction holds since its reserve');
SELECT is(idem_priv.as_ops($$SELECT count(*)::text FROM idempotency.stats_hourly
                             WHERE hour = date_trunc('hour', now() AT TIME ZONE 'UTC')
                                          AT TIME ZONE 'UTC'$$)
          || ' ' || idem_priv.as_ops($$SELECT day || '/' || coalesce(reserves_new::text, 'none')
                                       FROM idempotency.stats_daily ORDER BY day DESC LIMIT 1$$),
    (SELECT '1 ' || day || '/' || coalesce(reserves_new::text, 'none')
     FROM idempotency.stats_daily ORDER BY day DESC LIMIT 1),
    'operator: stats_hourly has the current hour, stats_daily shows what the owner sees');
SELECT is(idem_priv.as_app($$SELECT count(*)::text FROM idempotency.key_locks$$)
          || ' ' || idem_priv.as_app($$SELECT count(*)::text FROM idempotency.stats_hourly$$)
          || ' ' || idem_priv.as_app($$SELECT count(*)::text FROM idempotency.stats_daily$$)
          || ' ' || idem_priv.as_app($$SELECT count(*)::text FROM idempotency.stats_snapshots$$),
    'ERROR 42501 ERROR 42501 ERROR 42501 ERROR 42501',
    'application: key_locks, stats_hourly, stats_daily and the snapshots table are denied');

SELECT is(idem_priv.as_ops($$SELECT count(*)::text FROM idempotency.failed_keys WHERE scope = 'priv' AND dead$$)
          || ' ' || idem_priv.as_app($$SELECT count(*)::text FROM idempotency.failed_keys$$),
    '0 ERROR 42501', 'failed_keys: the operator reads it, the application does not');

-- A role with no grant at all.
SELECT is(idem_priv.as_nobody($$SELECT outcome::text FROM idempotency.reserve('priv', 'x')$$), 'ERROR 42501',
    'no grants: reserve is denied');
SELECT is(idem_priv.as_nobody($$SELECT count(*)::text FROM idempotency.lookup('priv', 'h1')$$), 'ERROR 42501',
    'no grants: lookup is denied');
SELECT is(idem_priv.as_nobody($$SELECT count(*)::text FROM idempotency.keys$$), 'ERROR 42501',
    'no grants: SELECT on idempotency.keys is denied');
SELECT is(idem_priv.as_nobody($$SELECT idempotency.uuidv7()::text$$), 'ERROR 42501',
    'no grants: without USAGE on the schema nothing is reachable');
-- ... and with USAGE only (what PUBLIC would get from a careless GRANT USAGE TO PUBLIC).
GRANT USAGE ON SCHEMA idempotency TO idem_priv_nobody;
SELECT is(idem_priv.as_nobody($$SELECT outcome::text FROM idempotency.reserve('priv', 'x')$$), 'ERROR 42501',
    'USAGE only: reserve is still denied');
SELECT is(idem_priv.as_nobody($$SELECT 'done' FROM idempotency.fail('priv', 'x')$$), 'ERROR 42501',
    'USAGE only: fail is still denied');
SELECT is(idem_priv.as_nobody($$SELECT idempotency.next_key('idem_priv_x')::text$$)
          || ' ' || idem_priv.as_nobody($$SELECT idempotency.accept('idem_priv', 'p0', 9)::text$$)
          || ' ' || idem_priv.as_nobody($$SELECT idempotency.emit('idem_priv', '{}')::text$$)
          || ' ' || idem_priv.as_nobody($$SELECT count(*)::text FROM idempotency.maintain()$$)
          || ' ' || idem_priv.as_nobody($$SELECT count(*)::text FROM idempotency.watermarks$$),
    'ERROR 42501 ERROR 42501 ERROR 42501 ERROR 42501 ERROR 42501',
    'USAGE only: next_key, accept, emit, maintain and the views are denied');
SELECT is(idem_priv.as_nobody($$SELECT 'done' FROM idempotency.set_watermark('idem_priv', 'p0', 1)$$)
          || ' ' || idem_priv.as_nobody($$SELECT idempotency.drop_consumer('idem_priv')::text$$),
    'ERROR 42501 ERROR 42501', 'USAGE only: set_watermark and drop_consumer are denied');
SELECT is(idem_priv.as_nobody($$SELECT count(*)::text FROM idempotency.keys_default$$), 'ERROR 42501',
    'USAGE only: the default partition is still denied');
-- SELECT on a view that calls stats_counters() is not enough without EXECUTE on it.
GRANT SELECT ON idempotency.stats_daily TO idem_priv_nobody;
SELECT is(idem_priv.as_nobody($$SELECT count(*)::text FROM idempotency.stats_daily$$),
    'ERROR 42501', 'SELECT on stats_daily without EXECUTE on stats_counters() is denied');

-- The calls above left the caller's identity intact (the switch to the table owner is undone,
-- also when a call fails inside an exception block).
SELECT is(idem_priv.as_app($$SELECT current_user || '/' || (
        SELECT count(*) FROM idempotency.lookup('priv', 'nokey')) || '/' || current_user$$),
    'idem_priv_app/0/idem_priv_app', 'the caller''s identity is restored after a call');
SELECT is(idem_priv.as_app($$SELECT 'done' FROM idempotency.complete('priv', 'nokey', 200, NULL)$$),
    'ERROR 55000', 'a call failing as the table owner ...');
SELECT is(idem_priv.as_app($$SELECT current_user::text$$), 'idem_priv_app',
    '... leaves the caller as itself');

-- Catalog: PUBLIC has no privilege on any table or sequence of the extension, the functions
-- that touch keys are not executable by PUBLIC, any SECURITY DEFINER function pins its
-- search_path, and the key tables belong to the extension's owner.
SELECT is((SELECT string_agg(c.relname, ', ' ORDER BY c.relname)
           FROM pg_class c, aclexplode(COALESCE(c.relacl, acldefault('r', c.relowner))) a
           WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'p', 'S')
             AND a.grantee = 0),
    NULL, 'PUBLIC has no privilege on any table or sequence in schema idempotency');
SELECT is((SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY p.oid::regprocedure::text)
           FROM pg_proc p
           WHERE p.oid IN ('idempotency.reserve(text, text, bytea, interval, interval, interval)'::regprocedure,
                           'idempotency.complete(text, text, integer, jsonb, integer)'::regprocedure,
                           'idempotency.fail(text, text, jsonb, integer)'::regprocedure,
                           'idempotency.checkpoint(text, text, text, integer)'::regprocedure,
                           'idempotency.lookup(text, text)'::regprocedure,
                           'idempotency.forget(text, text)'::regprocedure)
             AND has_function_privilege('public', p.oid, 'EXECUTE')),
    NULL, 'PUBLIC cannot execute the key lifecycle functions');
SELECT is((SELECT string_agg(p.oid::regprocedure::text, ', ')
           FROM pg_proc p
           WHERE p.pronamespace = 'idempotency'::regnamespace AND p.prosecdef
             AND NOT EXISTS (SELECT FROM unnest(p.proconfig) s WHERE s LIKE 'search_path=%')),
    NULL, 'every SECURITY DEFINER function of the extension pins its search_path');
SELECT is((SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'idempotency.keys'::regclass),
    (SELECT pg_get_userbyid(extowner) FROM pg_extension WHERE extname = 'idempotency'),
    'idempotency.keys belongs to the extension''s owner');
SELECT is((SELECT nspacl IS NULL OR NOT EXISTS (
               SELECT FROM aclexplode(nspacl) a WHERE a.grantee = 0 AND a.privilege_type = 'CREATE')
           FROM pg_namespace WHERE nspname = 'idempotency'),
    true, 'PUBLIC cannot create objects in schema idempotency');

SELECT * FROM finish();
ROLLBACK;
