-- The key lifecycle through the coordinator, with idempotency.keys distributed by scope
-- (each call delegated to the worker of the scope's shard). Errors are shown as psql prints
-- them: a call wrapped in PL/pgSQL (pg_temp.try of sql/) is not delegated and is refused.
\set VERBOSITY terse
SELECT logicalrelid, partmethod FROM pg_dist_partition
 WHERE logicalrelid = 'idempotency.keys'::regclass;

-- new, completed in the same transaction with the business row, then replay and mismatch.
BEGIN;
SELECT outcome, status_code, response, attempt
  FROM idempotency.reserve('tenant-1', 'k1', idempotency.fingerprint('{"amount": 100}'::jsonb));
INSERT INTO orders (tenant, key, amount) VALUES ('tenant-1', 'k1', 100);
SELECT idempotency.complete('tenant-1', 'k1', 201, '{"order": 7}', 1);
COMMIT;
SELECT outcome, status_code, response, attempt
  FROM idempotency.reserve('tenant-1', 'k1', idempotency.fingerprint('{"amount": 100}'::jsonb));
SELECT outcome FROM idempotency.reserve('tenant-1', 'k1', idempotency.fingerprint('{"amount": 9}'::jsonb));
SELECT state, status_code, response, attempt FROM idempotency.lookup('tenant-1', 'k1');
-- completing again: same result is a no-op, another result IK002.
SELECT idempotency.complete('tenant-1', 'k1', 201, '{"order": 7}');
SELECT idempotency.complete('tenant-1', 'k1', 200, '{"order": 7}');

-- A rolled-back reserve leaves no trace.
BEGIN;
SELECT outcome FROM idempotency.reserve('tenant-2', 'k-rollback');
ROLLBACK;
SELECT count(*) FROM idempotency.lookup('tenant-2', 'k-rollback');

-- fail releases the claim: attempt 2; the stale attempt is fenced.
SELECT outcome, attempt FROM idempotency.reserve('tenant-3', 'k-fail');
SELECT idempotency.fail('tenant-3', 'k-fail', '{"error": "timeout"}');
SELECT outcome, attempt FROM idempotency.reserve('tenant-3', 'k-fail');
SELECT idempotency.complete('tenant-3', 'k-fail', 200, '{}', 1);
SELECT idempotency.complete('tenant-3', 'k-fail', 200, '{}', 2);
SELECT state, attempt, last_error FROM idempotency.lookup('tenant-3', 'k-fail');

-- A live claim: in_progress; checkpoint; complete without a claim is 55000.
SELECT outcome FROM idempotency.reserve('tenant-4', 'k-live', lock_ttl => '1 hour');
SELECT idempotency.checkpoint('tenant-4', 'k-live', 'step-1');
SELECT outcome FROM idempotency.reserve('tenant-4', 'k-live');
SELECT state, recovery_point FROM idempotency.lookup('tenant-4', 'k-live');
SELECT idempotency.complete('tenant-4', 'never-reserved', 200, '{}');

-- forget, too_old, bad input.
SELECT idempotency.forget('tenant-4', 'k-live');
SELECT count(*) FROM idempotency.lookup('tenant-4', 'k-live');
SELECT outcome FROM idempotency.reserve('tenant-5', '01ARZ3NDEKTSV4RRFFQ69G5FAV');
SELECT outcome FROM idempotency.reserve('tenant-5', '');
SELECT outcome FROM idempotency.reserve('tenant-5', 'k', lock_ttl => '-1 second');
SELECT idempotency.complete('tenant-5', 'k', 999, '{}');

-- claim_once: a key per message, claimed and completed in one delegated call; a rollback
-- frees it, a redelivery is false, another holder's live lease is IK003.
BEGIN;
SELECT idempotency.claim_once('tenant-6', 'msg-1');
ROLLBACK;
SELECT idempotency.claim_once('tenant-6', 'msg-1');
SELECT idempotency.claim_once('tenant-6', 'msg-1');
SELECT state, attempt FROM idempotency.lookup('tenant-6', 'msg-1');
SELECT outcome FROM idempotency.reserve('tenant-6', 'msg-held', lock_ttl => '1 hour');
SELECT idempotency.claim_once('tenant-6', 'msg-held');

-- Not delegated (a CTE): refused.
WITH r AS (SELECT * FROM idempotency.reserve('tenant-6', 'cte')) SELECT outcome FROM r;

-- execute_once is refused where Citus distributes the keys (its statement would run here,
-- the claim on the scope's worker, in another transaction); nothing is claimed.
SELECT outcome FROM idempotency.execute_once('tenant-7', 'eo', NULL,
       'INSERT INTO orders (tenant, key, amount) VALUES ($1, $2, 1)', ARRAY['tenant-7', 'eo']);
SELECT count(*) FROM orders WHERE tenant = 'tenant-7';

-- The rows are in the shards; the key table's shells on this node hold nothing.
SELECT scope, key, state FROM idempotency.keys ORDER BY scope, key;
SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree('idempotency.keys');
