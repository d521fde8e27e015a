-- idempotency 0.1.0: exactly-once processing inside PostgreSQL.
-- Function bodies are C++ (the idempotency library); this script declares the surface.

\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

CREATE TYPE idempotency.outcome AS ENUM ('new', 'replay', 'in_progress', 'mismatch', 'too_old');

CREATE TYPE idempotency.reservation AS (
    outcome idempotency.outcome,
    status_code integer,
    response jsonb,
    attempt integer,
    recovery_point text,
    first_seen_at timestamptz,
    locked_until timestamptz,
    expires_at timestamptz
);

-- One row per live (scope, key). Partitioned by expires_at: a partition whose upper bound has
-- passed holds only expired records and is dropped whole. (scope, key) is unique among live
-- rows because every write happens under the key's advisory lock; an expired row may linger
-- beside a newer one until its partition is dropped, and every read ignores it.
CREATE TABLE idempotency.keys (
    scope text NOT NULL,
    key text NOT NULL,
    state text NOT NULL CHECK (state IN ('processing', 'completed', 'failed')),
    attempt integer NOT NULL CHECK (attempt > 0),
    request_hash bytea,
    status_code integer CHECK (status_code BETWEEN 100 AND 599),
    response jsonb,
    recovery_point text,
    last_error jsonb,
    first_seen_at timestamptz NOT NULL,
    completed_at timestamptz,
    locked_until timestamptz,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, scope, expires_at)
) PARTITION BY RANGE (expires_at);

CREATE TABLE idempotency.keys_default PARTITION OF idempotency.keys DEFAULT;

REVOKE ALL ON idempotency.keys, idempotency.keys_default FROM PUBLIC;

-- Key lifecycle. The library switches to the owner of idempotency.keys for its storage
-- access and schema-qualifies every object it names, so callers need only EXECUTE.

CREATE FUNCTION idempotency.reserve(
    scope text,
    key text,
    request_hash bytea DEFAULT NULL,
    lock_ttl interval DEFAULT '5 minutes',
    retention interval DEFAULT '24 hours',
    wait interval DEFAULT '0')
RETURNS idempotency.reservation
AS 'MODULE_PATHNAME', 'idem_reserve' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.complete(
    scope text, key text, status_code integer, response jsonb, attempt integer DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_complete' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.fail(
    scope text, key text, error jsonb DEFAULT NULL, attempt integer DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_fail' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.checkpoint(
    scope text, key text, recovery_point text, attempt integer DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_checkpoint' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.lookup(scope text, key text)
RETURNS TABLE (
    state text,
    status_code integer,
    response jsonb,
    request_hash bytea,
    attempt integer,
    recovery_point text,
    last_error jsonb,
    first_seen_at timestamptz,
    completed_at timestamptz,
    locked_until timestamptz,
    expires_at timestamptz)
AS 'MODULE_PATHNAME', 'idem_lookup' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

CREATE FUNCTION idempotency.forget(scope text, key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_forget' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Fingerprints and keys.

CREATE FUNCTION idempotency.fingerprint(body jsonb, exclude text[] DEFAULT '{}')
RETURNS bytea
AS 'MODULE_PATHNAME', 'idem_fingerprint_jsonb' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION idempotency.fingerprint(body bytea)
RETURNS bytea
AS 'MODULE_PATHNAME', 'idem_fingerprint_bytea' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION idempotency.uuidv7()
RETURNS uuid
AS 'MODULE_PATHNAME', 'idem_uuidv7' LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE FUNCTION idempotency.key_time(key text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'idem_key_time' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Only roles granted EXECUTE (see README, "Roles") may touch keys.
REVOKE ALL ON FUNCTION
    idempotency.reserve(text, text, bytea, interval, interval, interval),
    idempotency.complete(text, text, integer, jsonb, integer),
    idempotency.fail(text, text, jsonb, integer),
    idempotency.checkpoint(text, text, text, integer),
    idempotency.lookup(text, text),
    idempotency.forget(text, text)
FROM PUBLIC;

-- === outbox ===
-- emit writes a transactional logical message (prefix 'idempotency'); the output plugin
-- `idempotency` of this library decodes it with the key (commit LSN, message LSN).

CREATE FUNCTION idempotency.emit(topic text, payload jsonb)
RETURNS pg_lsn
AS 'MODULE_PATHNAME', 'idem_emit' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.lsn_key(commit_lsn pg_lsn, lsn pg_lsn)
RETURNS uuid
AS 'MODULE_PATHNAME', 'idem_lsn_key' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION idempotency.lsn_key_parts(key uuid, OUT commit_lsn pg_lsn, OUT lsn pg_lsn)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_lsn_key_parts' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Writing to the outbox is a privilege, like writing keys.
REVOKE ALL ON FUNCTION idempotency.emit(text, jsonb) FROM PUBLIC;

-- === monotonic keys and consumer watermarks ===

-- One row per stream. reserved_up_to is the durable bound: next_key never handed out a value
-- above it. next_key moves it one block up by overwriting the row in place (WAL-logged,
-- flushed, outside the caller's transaction), so the row must never be UPDATEd: the trigger
-- below refuses it. Use create_stream / drop_stream.
CREATE TABLE idempotency.streams (
    stream text COLLATE "C" PRIMARY KEY,
    block integer NOT NULL CHECK (block > 0),
    reserved_up_to bigint NOT NULL DEFAULT 0 CHECK (reserved_up_to >= 0)
);

CREATE FUNCTION idempotency.streams_refuse_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rows of idempotency.streams cannot be updated'
        USING ERRCODE = '55000',
              HINT = 'next_key overwrites them in place; use create_stream and drop_stream.';
END
$$;

CREATE TRIGGER streams_refuse_update BEFORE UPDATE ON idempotency.streams
    FOR EACH ROW EXECUTE FUNCTION idempotency.streams_refuse_update();

-- One row per (consumer, partition): the highest accepted position, an unsigned 128-bit
-- number stored big-endian in a uuid (uuid order is numeric order).
CREATE TABLE idempotency.consumer_positions (
    consumer text COLLATE "C" NOT NULL,
    partition text COLLATE "C" NOT NULL,
    position uuid NOT NULL,
    PRIMARY KEY (consumer, partition)
) WITH (fillfactor = 70);

REVOKE ALL ON idempotency.streams, idempotency.consumer_positions FROM PUBLIC;

-- pg_dump keeps the bounds and the watermarks: a restored database neither repeats keys nor
-- re-processes messages.
SELECT pg_catalog.pg_extension_config_dump('idempotency.streams', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.consumer_positions', '');

CREATE FUNCTION idempotency.create_stream(stream text, block integer DEFAULT 1000)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_create_stream' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.drop_stream(stream text)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_drop_stream' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.next_key(stream text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idem_next_key' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.accept(consumer text, partition text, "position" bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_accept_bigint' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.accept(consumer text, partition text, "position" uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_accept_uuid' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.watermark(consumer text, partition text)
RETURNS numeric
AS 'MODULE_PATHNAME', 'idem_watermark' LANGUAGE C STABLE PARALLEL UNSAFE;

-- A 128-bit position (uuid bytes, big-endian) as its unsigned value.
CREATE FUNCTION idempotency.position_numeric("position" uuid)
RETURNS numeric
AS 'MODULE_PATHNAME', 'idem_position_numeric' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE VIEW idempotency.watermarks AS
    SELECT consumer, partition, idempotency.position_numeric(position) AS watermark, position
    FROM idempotency.consumer_positions;

REVOKE ALL ON idempotency.watermarks FROM PUBLIC;
REVOKE ALL ON FUNCTION
    idempotency.create_stream(text, integer),
    idempotency.drop_stream(text),
    idempotency.next_key(text),
    idempotency.accept(text, text, bigint),
    idempotency.accept(text, text, uuid),
    idempotency.watermark(text, text)
FROM PUBLIC;

-- === storage, pruning and operator views ===
-- Partitions of idempotency.keys are created and dropped by maintain() (or pg_partman after
-- use_partman()); none is created here, so none belongs to the extension and each can be
-- dropped on its own. Settings: idempotency.partition_width, premake, max_retention,
-- maintenance_lock_timeout, maintenance_interval, database (see README). maintain() and
-- use_partman() run as the owner of idempotency.keys with search_path, TimeZone and the other
-- settings they depend on pinned (pg_partman included), in a security-restricted operation.

CREATE FUNCTION idempotency.maintain()
RETURNS TABLE (
    action text,            -- created, dropped, purged, skipped, failed, deferred
    partition text,
    range_start timestamptz,
    range_end timestamptz,
    rows bigint,
    detail text)
AS 'MODULE_PATHNAME', 'idem_maintain' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.use_partman()
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_use_partman' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Bounds of a partition of idempotency.keys. pg_get_expr prints them in the session's
-- DateStyle and TimeZone, whose abbreviations may not read back (IST): printed and read here
-- in ISO and UTC. EXECUTE stays with PUBLIC (it shows only catalog data), as the view's
-- readers call it.
CREATE FUNCTION idempotency.partition_bounds(part oid,
    OUT is_default boolean, OUT range_start timestamptz, OUT range_end timestamptz)
RETURNS record
LANGUAGE sql STABLE PARALLEL SAFE
SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.expr OPERATOR(pg_catalog.=) 'DEFAULT',
           pg_catalog.substring(e.expr, 'FROM \(''([^'']*)''\)')::pg_catalog.timestamptz,
           pg_catalog.substring(e.expr, 'TO \(''([^'']*)''\)')::pg_catalog.timestamptz
    FROM pg_catalog.pg_class c,
         LATERAL pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS e(expr)
    WHERE c.oid OPERATOR(pg_catalog.=) part
$$;

CREATE VIEW idempotency.partitions AS
    SELECT c.relname::text AS partition,
           b.range_start,
           b.range_end,
           CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END AS rows_estimate,
           b.is_default,
           coalesce(NOT b.is_default AND b.range_end <= now(), false) AS due_to_drop
    FROM pg_catalog.pg_inherits i
    JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL idempotency.partition_bounds(c.oid) b
    WHERE i.inhparent = 'idempotency.keys'::regclass
    ORDER BY b.is_default, b.range_start NULLS FIRST;

-- Live claims: being processed, lease not lapsed.
CREATE VIEW idempotency.in_flight AS
    SELECT scope, key, attempt, locked_until, recovery_point, first_seen_at, expires_at
    FROM idempotency.keys
    WHERE state = 'processing' AND locked_until > now() AND expires_at > now();

-- Claims whose lease lapsed without complete or fail (crashed holders): the next reserve
-- takes them over; a recovery job can re-drive them from recovery_point.
CREATE VIEW idempotency.abandoned AS
    SELECT scope, key, attempt, locked_until, recovery_point, first_seen_at, expires_at
    FROM idempotency.keys
    WHERE state = 'processing' AND locked_until <= now() AND expires_at > now();

CREATE FUNCTION idempotency.stats_counters(
    OUT reserves_new bigint,
    OUT reserves_replay bigint,
    OUT reserves_in_progress bigint,
    OUT reserves_mismatch bigint,
    OUT reserves_too_old bigint,
    OUT completes bigint,
    OUT fails bigint,
    OUT takeovers bigint,
    OUT since timestamptz,
    OUT shared_memory boolean)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_stats' LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW idempotency.stats AS SELECT * FROM idempotency.stats_counters();

CREATE FUNCTION idempotency.stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'idem_stats_reset' LANGUAGE C VOLATILE PARALLEL RESTRICTED;

REVOKE ALL ON idempotency.partitions, idempotency.in_flight, idempotency.abandoned,
    idempotency.stats FROM PUBLIC;
REVOKE ALL ON FUNCTION
    idempotency.maintain(),
    idempotency.use_partman(),
    idempotency.stats_counters(),
    idempotency.stats_reset()
FROM PUBLIC;
