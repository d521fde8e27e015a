-- Benchmark schema: run by bench/run.sh as a superuser in the benchmark database.
-- psql variables: w3keys (how many completed keys W3 replays).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS idempotency;

DROP SCHEMA IF EXISTS bench CASCADE;
CREATE SCHEMA bench;

-- The business write every workload makes (W0 makes only this one).
CREATE TABLE bench.orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    client integer NOT NULL,
    amount integer NOT NULL,
    note text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- W1: the hand-written pattern's key table, with the usual columns.
CREATE TABLE bench.idempotency_keys (
    scope text NOT NULL,
    key text NOT NULL,
    request_hash bytea,
    status text NOT NULL CHECK (status IN ('processing', 'completed', 'failed')),
    response_code integer,
    response_body jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    locked_until timestamptz,
    PRIMARY KEY (scope, key)
);

-- Keys of earlier benchmark runs (a reused cluster) would turn W2's new keys into replays.
DELETE FROM idempotency.keys WHERE scope LIKE 'bench-%';

-- W3 replays keys completed here, 1000 per transaction.
CREATE PROCEDURE bench.complete_w3_keys(n integer)
LANGUAGE plpgsql AS $$
BEGIN
    FOR b IN 0 .. (n - 1) / 1000 LOOP
        PERFORM idempotency.reserve('bench-w3', i::text,
                                    idempotency.fingerprint(jsonb_build_object('amount', i))),
                idempotency.complete('bench-w3', i::text, 201,
                                     jsonb_build_object('status', 'created', 'amount', i))
        FROM generate_series(b * 1000 + 1, least(n, (b + 1) * 1000)) AS i;
        COMMIT;
    END LOOP;
END $$;
CALL bench.complete_w3_keys(:w3keys);

-- W5: W2's key row in a plain table of the same columns and primary key, without checks.
CREATE TABLE bench.key_floor (
    scope text NOT NULL,
    key text NOT NULL,
    state text NOT NULL,
    attempt integer NOT NULL,
    request_hash bytea,
    status_code integer,
    response jsonb,
    first_seen_at timestamptz NOT NULL,
    completed_at timestamptz,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, scope, expires_at)
);

-- As many completed keys in W1's and W5's tables, so all key tables start equal and their
-- statistics are real: analyzed empty, the planner would scan them sequentially (generic plans
-- are chosen on each connection's sixth execution, before autovacuum looks at the tables).
INSERT INTO bench.idempotency_keys (scope, key, request_hash, status, response_code,
                                    response_body, locked_until)
SELECT 'bench-w1-seed', i::text,
       sha256(convert_to(jsonb_build_object('amount', i)::text, 'UTF8')), 'completed', 201,
       jsonb_build_object('status', 'created', 'amount', i), NULL
FROM generate_series(1, :w3keys) AS i;
INSERT INTO bench.key_floor (scope, key, state, attempt, request_hash, status_code, response,
                             first_seen_at, completed_at, expires_at)
SELECT 'bench-w5-seed', i::text, 'completed', 1,
       sha256(convert_to(jsonb_build_object('amount', i)::text, 'UTF8')), 201,
       jsonb_build_object('status', 'created', 'amount', i), now(), now(), now() + interval '24 hours'
FROM generate_series(1, :w3keys) AS i;

VACUUM ANALYZE bench.orders, bench.idempotency_keys, bench.key_floor, idempotency.keys;
