-- bench/scale: the key shapes, request hashes and responses both tables store, and the
-- hand-written pattern's table. bench/scale.sh replaces @T0@ (the first loaded key's first
-- request, in epoch seconds) and @STEP@ (seconds between two loaded keys' first requests).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS idempotency;
DROP SCHEMA IF EXISTS bench CASCADE;
CREATE SCHEMA bench;

-- When loaded key i was first requested: keys 1..N spread evenly over the retention, key N
-- the latest.
CREATE FUNCTION bench.seen_at(i bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT to_timestamp(@T0@ + i * @STEP@::float8) $$;

-- Key i, first requested at `at`: a third each of UUIDv4, UUIDv7 (`at` in its first 48 bits,
-- as a client generating it then would) and Stripe-like tokens ('idk_' and 22 base64 letters).
-- Deterministic, so the workloads can name any loaded key again.
CREATE FUNCTION bench.key_of(i bigint, at timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE i % 3
    WHEN 0 THEN substr(md5(i::text), 1, 8) || '-' || substr(md5(i::text), 9, 4) || '-4' ||
                substr(md5(i::text), 14, 3) || '-' || substr('89ab', (i % 4)::int + 1, 1) ||
                substr(md5(i::text), 18, 3) || '-' || substr(md5(i::text), 21, 12)
    WHEN 1 THEN substr(lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0'), 1, 8) ||
                '-' || substr(lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0'), 9, 4) ||
                '-7' || substr(md5(i::text), 1, 3) || '-' || substr('89ab', (i % 4)::int + 1, 1) ||
                substr(md5(i::text), 4, 3) || '-' || substr(md5(i::text), 7, 12)
    ELSE 'idk_' || substr(translate(encode(decode(md5(i::text), 'hex'), 'base64'), '+/', 'Az'), 1, 22)
END $$;

-- The request's fingerprint (32 bytes, as idempotency.fingerprint gives).
CREATE FUNCTION bench.hash_of(i bigint) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT sha256(int8send(i)) $$;

-- A payment API's answer, about 300 bytes of JSON.
CREATE FUNCTION bench.response_of(i bigint) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT jsonb_build_object(
    'id', 'ch_' || substr(md5(i::text), 1, 24),
    'object', 'charge',
    'amount', i % 100000,
    'currency', 'usd',
    'status', 'succeeded',
    'captured', true,
    'created', 1700000000 + i,
    'customer', 'cus_' || substr(md5((i + 1)::text), 1, 14),
    'description', 'Order ' || i || ' (web checkout)',
    'payment_method', 'pm_' || substr(md5((i + 2)::text), 1, 24),
    'receipt_email', 'customer' || (i % 1000) || '@example.com',
    'metadata', jsonb_build_object('order_id', i, 'source', 'web'))
$$;

-- The hand-written pattern's key table (as bench/setup.sql's W1), pruned by a DELETE on
-- created_at, which needs the second index.
CREATE TABLE bench.hw_keys (
    scope text NOT NULL,
    key text NOT NULL,
    request_hash bytea,
    status text NOT NULL CHECK (status IN ('processing', 'completed', 'failed')),
    response_code integer,
    response_body jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    locked_until timestamptz
);
