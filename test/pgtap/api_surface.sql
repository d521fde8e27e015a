-- The key lifecycle's SQL surface: names, signatures, types and privileges users program against.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off
BEGIN;
CREATE EXTENSION IF NOT EXISTS idempotency;
SELECT plan(60);

SELECT has_schema('idempotency');
SELECT has_extension('idempotency');

-- types
SELECT has_enum('idempotency', 'outcome', 'outcome is an enum');
SELECT enum_has_labels('idempotency', 'outcome', ARRAY['new', 'replay', 'in_progress', 'mismatch', 'too_old']);
SELECT has_composite('idempotency', 'reservation', 'reservation is a composite type');
SELECT columns_are('idempotency', 'reservation',
    ARRAY['outcome', 'status_code', 'response', 'attempt', 'recovery_point', 'first_seen_at',
          'locked_until', 'expires_at']);
SELECT col_type_is('idempotency', 'reservation', 'outcome', 'idempotency', 'outcome', 'reservation.outcome');
SELECT col_type_is('idempotency', 'reservation', 'response', 'jsonb', 'reservation.response');
SELECT col_type_is('idempotency', 'reservation', 'expires_at', 'timestamp with time zone', 'reservation.expires_at');

-- functions: argument types, return types, languages (C++ bodies, not PL/pgSQL)
SELECT has_function('idempotency', 'reserve', ARRAY['text', 'text', 'bytea', 'interval', 'interval', 'interval']);
SELECT function_returns('idempotency', 'reserve', ARRAY['text', 'text', 'bytea', 'interval', 'interval', 'interval'], 'idempotency.reservation');
SELECT has_function('idempotency', 'reserve_begin', ARRAY['text', 'text', 'bytea', 'interval', 'interval', 'interval']);
SELECT function_returns('idempotency', 'reserve_begin', ARRAY['text', 'text', 'bytea', 'interval', 'interval', 'interval'], 'idempotency.reservation');
SELECT function_lang_is('idempotency', 'reserve_begin', ARRAY['text', 'text', 'bytea', 'interval', 'interval', 'interval'], 'c');
SELECT volatility_is('idempotency', 'reserve_begin', ARRAY['text', 'text', 'bytea', 'interval', 'interval', 'interval'], 'volatile');
SELECT has_function('idempotency', 'complete', ARRAY['text', 'text', 'integer', 'jsonb', 'integer']);
SELECT function_returns('idempotency', 'complete', ARRAY['text', 'text', 'integer', 'jsonb', 'integer'], 'void');
SELECT has_function('idempotency', 'fail', ARRAY['text', 'text', 'jsonb', 'integer']);
SELECT function_returns('idempotency', 'fail', ARRAY['text', 'text', 'jsonb', 'integer'], 'void');
SELECT has_function('idempotency', 'checkpoint', ARRAY['text', 'text', 'text', 'integer']);
SELECT function_returns('idempotency', 'checkpoint', ARRAY['text', 'text', 'text', 'integer'], 'void');
SELECT has_function('idempotency', 'lookup', ARRAY['text', 'text']);
SELECT function_returns('idempotency', 'lookup', ARRAY['text', 'text'], 'setof record');
SELECT has_function('idempotency', 'forget', ARRAY['text', 'text']);
SELECT function_returns('idempotency', 'forget', ARRAY['text', 'text'], 'boolean');
SELECT has_function('idempotency', 'claim_once', ARRAY['text', 'text', 'interval', 'interval']);
SELECT function_returns('idempotency', 'claim_once', ARRAY['text', 'text', 'interval', 'interval'], 'boolean');
SELECT has_function('idempotency', 'execute_once', ARRAY['text', 'text', 'bytea', 'text', 'text[]', 'integer', 'interval', 'interval', 'interval']);
SELECT function_returns('idempotency', 'execute_once', ARRAY['text', 'text', 'bytea', 'text', 'text[]', 'integer', 'interval', 'interval', 'interval'], 'idempotency.reservation');
SELECT function_lang_is('idempotency', 'execute_once', ARRAY['text', 'text', 'bytea', 'text', 'text[]', 'integer', 'interval', 'interval', 'interval'], 'c');
SELECT volatility_is('idempotency', 'execute_once', ARRAY['text', 'text', 'bytea', 'text', 'text[]', 'integer', 'interval', 'interval', 'interval'], 'volatile');
SELECT isnt_definer('idempotency', 'execute_once', ARRAY['text', 'text', 'bytea', 'text', 'text[]', 'integer', 'interval', 'interval', 'interval'],
    'execute_once is not SECURITY DEFINER: the statement runs as the caller');
SELECT function_returns('idempotency', 'fingerprint', ARRAY['jsonb', 'text[]'], 'bytea');
SELECT function_returns('idempotency', 'fingerprint', ARRAY['bytea'], 'bytea');
SELECT function_returns('idempotency', 'uuidv7', ARRAY[]::text[], 'uuid');
SELECT function_returns('idempotency', 'key_time', ARRAY['text'], 'timestamp with time zone');
SELECT function_lang_is('idempotency', 'reserve', ARRAY['text', 'text', 'bytea', 'interval', 'interval', 'interval'], 'c');
SELECT function_lang_is('idempotency', 'complete', ARRAY['text', 'text', 'integer', 'jsonb', 'integer'], 'c');
SELECT function_lang_is('idempotency', 'fingerprint', ARRAY['jsonb', 'text[]'], 'c');
SELECT volatility_is('idempotency', 'fingerprint', ARRAY['jsonb', 'text[]'], 'immutable');
SELECT function_lang_is('idempotency', 'claim_once', ARRAY['text', 'text', 'interval', 'interval'], 'c');
SELECT volatility_is('idempotency', 'claim_once', ARRAY['text', 'text', 'interval', 'interval'], 'volatile');
SELECT volatility_is('idempotency', 'reserve', ARRAY['text', 'text', 'bytea', 'interval', 'interval', 'interval'], 'volatile');

-- argument names and defaults, as callers use them with named notation
SELECT is(
    (SELECT pg_get_function_arguments('idempotency.reserve(text, text, bytea, interval, interval, interval)'::regprocedure)),
    'scope text, key text, request_hash bytea DEFAULT NULL::bytea, lock_ttl interval DEFAULT ''00:05:00''::interval, retention interval DEFAULT ''24:00:00''::interval, wait interval DEFAULT ''00:00:00''::interval',
    'reserve arguments and defaults');
SELECT is(
    (SELECT pg_get_function_arguments('idempotency.reserve_begin(text, text, bytea, interval, interval, interval)'::regprocedure)),
    'scope text, key text, request_hash bytea DEFAULT NULL::bytea, lock_ttl interval DEFAULT ''00:05:00''::interval, retention interval DEFAULT ''24:00:00''::interval, wait interval DEFAULT ''00:00:00''::interval',
    'reserve_begin arguments and defaults, as reserve');
SELECT is(
    (SELECT pg_get_function_arguments('idempotency.complete(text, text, integer, jsonb, integer)'::regprocedure)),
    'scope text, key text, status_code integer, response jsonb, attempt integer DEFAULT NULL::integer',
    'complete arguments and defaults');
SELECT is(
    (SELECT pg_get_function_arguments('idempotency.fail(text, text, jsonb, integer)'::regprocedure)),
    'scope text, key text, error jsonb DEFAULT NULL::jsonb, attempt integer DEFAULT NULL::integer',
    'fail arguments and defaults');
SELECT is(
    (SELECT pg_get_function_arguments('idempotency.checkpoint(text, text, text, integer)'::regprocedure)),
    'scope text, key text, recovery_point text, attempt integer DEFAULT NULL::integer',
    'checkpoint arguments and defaults');
SELECT is(
    (SELECT pg_get_function_arguments('idempotency.claim_once(text, text, interval, interval)'::regprocedure)),
    'scope text, key text, retention interval DEFAULT ''24:00:00''::interval, wait interval DEFAULT ''00:00:00''::interval',
    'claim_once arguments and defaults');
SELECT is(
    (SELECT pg_get_function_arguments('idempotency.execute_once(text, text, bytea, text, text[], integer, interval, interval, interval)'::regprocedure)),
    'scope text, key text, request_hash bytea, statement text, params text[] DEFAULT ''{}''::text[], status_code integer DEFAULT 201, lock_ttl interval DEFAULT ''00:05:00''::interval, retention interval DEFAULT ''24:00:00''::interval, wait interval DEFAULT ''00:00:00''::interval',
    'execute_once arguments and defaults');
SELECT is(
    (SELECT pg_get_function_result('idempotency.lookup(text, text)'::regprocedure)),
    'TABLE(state text, status_code integer, response jsonb, request_hash bytea, attempt integer, recovery_point text, last_error jsonb, first_seen_at timestamp with time zone, completed_at timestamp with time zone, locked_until timestamp with time zone, expires_at timestamp with time zone)',
    'lookup columns');

-- the key table: partitioned by expires_at, closed to PUBLIC
SELECT has_table('idempotency', 'keys', 'idempotency.keys exists');
SELECT is((SELECT relkind::text FROM pg_class WHERE oid = 'idempotency.keys'::regclass), 'p',
          'idempotency.keys is partitioned');
SELECT is((SELECT pg_get_partkeydef('idempotency.keys'::regclass)), 'RANGE (expires_at)',
          'partitioned by range of expires_at');
SELECT ok(NOT has_table_privilege('public', 'idempotency.keys', 'SELECT, INSERT, UPDATE, DELETE'),
          'PUBLIC has no access to idempotency.keys');
SELECT ok(NOT has_function_privilege('public', 'idempotency.reserve(text, text, bytea, interval, interval, interval)', 'EXECUTE'),
          'PUBLIC may not execute reserve');
SELECT ok(NOT has_function_privilege('public', 'idempotency.reserve_begin(text, text, bytea, interval, interval, interval)', 'EXECUTE'),
          'PUBLIC may not execute reserve_begin');
SELECT ok(NOT has_function_privilege('public', 'idempotency.claim_once(text, text, interval, interval)', 'EXECUTE'),
          'PUBLIC may not execute claim_once');
SELECT ok(NOT has_function_privilege('public', 'idempotency.execute_once(text, text, bytea, text, text[], integer, interval, interval, interval)', 'EXECUTE'),
          'PUBLIC may not execute execute_once');
SELECT ok(has_function_privilege('public', 'idempotency.fingerprint(jsonb, text[])', 'EXECUTE'),
          'PUBLIC may execute fingerprint');

SELECT * FROM finish();
ROLLBACK;
