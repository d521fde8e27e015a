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
    PRIMARY KEY (scope, key, expires_at)
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
