-- maintain() runs as the owner of idempotency.keys (a superuser): code it reaches through the
-- caller's search_path (an event trigger's unqualified calls, pg_partman's PL/pgSQL) must not
-- resolve to functions an operator planted in a schema of its own. Both branches: maintain()'s
-- own partitioning and the hand-off to pg_partman (when pg_partman is available).
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off
BEGIN;
CREATE EXTENSION IF NOT EXISTS idempotency;
SELECT plan(8);
SET LOCAL idempotency.partition_width = '1d';
SET LOCAL idempotency.premake = 2;

-- The operator of docs/operations.md "Roles and privileges", owning a schema where it plants look-alikes
-- of built-ins pg_partman (and a careless event trigger) call unqualified.
CREATE ROLE idem_msp_ops NOLOGIN;
GRANT USAGE ON SCHEMA idempotency TO idem_msp_ops;
GRANT EXECUTE ON FUNCTION idempotency.maintain() TO idem_msp_ops;
CREATE SCHEMA idem_msp_ops AUTHORIZATION idem_msp_ops;
CREATE TABLE idem_msp_ops.calls (who text, what text);
ALTER TABLE idem_msp_ops.calls OWNER TO idem_msp_ops;
GRANT INSERT, SELECT ON idem_msp_ops.calls TO PUBLIC;
SET ROLE idem_msp_ops;
CREATE FUNCTION idem_msp_ops.length(t text) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idem_msp_ops.calls VALUES (current_user, 'length');
    RETURN pg_catalog.length(t);
END $$;
CREATE FUNCTION idem_msp_ops.current_setting(t text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idem_msp_ops.calls VALUES (current_user, 'current_setting');
    RETURN pg_catalog.current_setting(t);
END $$;
-- idem_msp_ops.run(sql, path): runs sql as the operator under path; returns its result and
-- the search_path the session has after the call.
CREATE FUNCTION idem_msp_ops.run(sql text, path text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    result text;
    saved text := pg_catalog.current_setting('search_path');
BEGIN
    BEGIN
        PERFORM pg_catalog.set_config('search_path', path, true);
        EXECUTE sql INTO result;
        result := result || ' / ' || pg_catalog.current_setting('search_path');
    EXCEPTION WHEN OTHERS THEN
        result := 'ERROR ' || SQLSTATE || ' ' || SQLERRM;
    END;
    PERFORM pg_catalog.set_config('search_path', saved, true);
    RETURN result;
END $$;
RESET ROLE;

\set hostile 'idem_msp_ops, pg_catalog'

-- The trap is live for the operator itself.
SELECT is(idem_msp_ops.run($$SELECT length('abc')::text$$, :'hostile'), '3 / idem_msp_ops, pg_catalog',
    'control: under the hostile search_path an unqualified length() is the planted one');
DELETE FROM idem_msp_ops.calls;

-- An event trigger an administrator wrote with an unqualified call: it runs as the table owner
-- for maintain()'s DDL, and under maintain()'s search_path, not the caller's.
CREATE FUNCTION public.idem_msp_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM length('ddl'); END $$;
CREATE EVENT TRIGGER idem_msp_ddl ON ddl_command_end EXECUTE FUNCTION public.idem_msp_ddl();

SELECT matches(idem_msp_ops.run($$SELECT count(*)::text FROM idempotency.maintain()
                                  WHERE action OPERATOR(pg_catalog.=) 'created'$$, :'hostile'),
    '^[1-9][0-9]* / idem_msp_ops, pg_catalog$',
    'maintain() under the hostile path creates partitions and leaves the caller''s search_path');
SELECT is((SELECT string_agg(who || ':' || what, ', ') FROM idem_msp_ops.calls), NULL,
    'no planted function ran during maintain()''s own DDL');
DROP EVENT TRIGGER idem_msp_ddl;

-- A second run has nothing to do, and leaves the caller's lock_timeout as it was.
SELECT is(idem_msp_ops.run($$SELECT pg_catalog.current_setting('lock_timeout') || ',' || pg_catalog.count(*)
                             FROM idempotency.maintain()$$, :'hostile'),
    pg_catalog.current_setting('lock_timeout') || ',0 / idem_msp_ops, pg_catalog',
    'lock_timeout is the caller''s again after maintain()');

-- The pg_partman branch: partman.run_maintenance calls length() and current_setting()
-- unqualified.
SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pg_partman') AS have_partman \gset
\if :have_partman
    CREATE SCHEMA idem_msp_partman;
    SET LOCAL client_min_messages = warning;
    CREATE EXTENSION pg_partman SCHEMA idem_msp_partman;
    RESET client_min_messages;
    SELECT ok(idempotency.use_partman(), 'use_partman() hands the table to pg_partman');
    SELECT matches(idem_msp_ops.run($$SELECT pg_catalog.string_agg(action, ',') FROM idempotency.maintain()$$, :'hostile'),
        'deferred / idem_msp_ops, pg_catalog$',
        'maintain() under the hostile path runs pg_partman and leaves the caller''s search_path');
    SELECT is((SELECT string_agg(who || ':' || what, ', ') FROM idem_msp_ops.calls), NULL,
        'no planted function ran inside pg_partman');
    SELECT is((SELECT count(*) FROM pg_catalog.pg_proc p
               WHERE p.pronamespace = 'idem_msp_ops'::regnamespace), 3::bigint,
        'the planted functions were there all along');
\else
    SELECT skip('pg_partman is not installed', 4);
\endif

SELECT * FROM finish();
ROLLBACK;
