-- Edge cases of the key lifecycle: savepoints around checkpoint and forget, read-only
-- transactions, and intervals that would overflow a timestamp.
\set VERBOSITY terse
\i sql/include/try.sql

-- A checkpoint inside a rolled-back savepoint is undone, also for a claim made in the same
-- transaction.
BEGIN;
SELECT outcome FROM idempotency.reserve('edges', 'cp');
SELECT idempotency.checkpoint('edges', 'cp', 'step-1');
SAVEPOINT s;
SELECT idempotency.checkpoint('edges', 'cp', 'step-2');
SELECT recovery_point FROM idempotency.lookup('edges', 'cp');
ROLLBACK TO SAVEPOINT s;
SELECT recovery_point FROM idempotency.lookup('edges', 'cp');
COMMIT;
SELECT state, recovery_point FROM idempotency.lookup('edges', 'cp');

-- ... and for a committed claim.
SELECT outcome FROM idempotency.reserve('edges', 'cp-committed');
BEGIN;
SAVEPOINT s;
SELECT idempotency.checkpoint('edges', 'cp-committed', 'step-2');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT recovery_point FROM idempotency.lookup('edges', 'cp-committed');

-- A forget inside a rolled-back savepoint is undone: the claim can still be completed.
BEGIN;
SELECT outcome FROM idempotency.reserve('edges', 'forget-sp');
SAVEPOINT s;
SELECT idempotency.forget('edges', 'forget-sp');
SELECT count(*) FROM idempotency.lookup('edges', 'forget-sp');
ROLLBACK TO SAVEPOINT s;
SELECT state FROM idempotency.lookup('edges', 'forget-sp');
SELECT idempotency.complete('edges', 'forget-sp', 200, '"kept"');
COMMIT;
SELECT state, response FROM idempotency.lookup('edges', 'forget-sp');

-- A forget that stands removes the claim for good, also at commit.
BEGIN;
SELECT outcome FROM idempotency.reserve('edges', 'forget-tx');
SELECT idempotency.forget('edges', 'forget-tx');
SELECT pg_temp.try($$SELECT idempotency.complete('edges', 'forget-tx', 200, '{}')$$);
COMMIT;
SELECT count(*) FROM idempotency.keys WHERE scope = 'edges' AND key = 'forget-tx';
-- the key is new again, in a later transaction or the same one
BEGIN;
SELECT outcome, attempt FROM idempotency.reserve('edges', 'forget-tx');
SELECT idempotency.forget('edges', 'forget-tx');
SELECT outcome, attempt FROM idempotency.reserve('edges', 'forget-tx');
COMMIT;
SELECT state FROM idempotency.lookup('edges', 'forget-tx');

-- Read-only transactions cannot claim, complete, fail, checkpoint or forget; lookup works.
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idempotency.reserve('edges', 'ro')$$);
SELECT pg_temp.try($$SELECT idempotency.complete('edges', 'cp', 200, '{}')$$);
SELECT pg_temp.try($$SELECT idempotency.fail('edges', 'cp')$$);
SELECT pg_temp.try($$SELECT idempotency.checkpoint('edges', 'cp', 'x')$$);
SELECT pg_temp.try($$SELECT idempotency.forget('edges', 'cp')$$);
SELECT state FROM idempotency.lookup('edges', 'cp');
COMMIT;
-- A claim made before the transaction turned read-only cannot be committed.
BEGIN;
SELECT outcome FROM idempotency.reserve('edges', 'ro-late');
SET TRANSACTION READ ONLY;
COMMIT;
SELECT count(*) FROM idempotency.keys WHERE scope = 'edges' AND key = 'ro-late';

-- Leases and retention that would end past the last valid timestamp (year 294276) are
-- refused; a wait that long is just a long wait. (A month counts 30 days.)
SELECT pg_temp.try($$SELECT idempotency.reserve('edges', 'far', lock_ttl => '106750000 days')$$);
SELECT pg_temp.try($$SELECT idempotency.reserve('edges', 'far', lock_ttl => '106751991 days')$$);
SELECT pg_temp.try($$SELECT idempotency.reserve('edges', 'far', lock_ttl => '300000 years')$$);
SELECT count(*) FROM idempotency.keys WHERE scope = 'edges' AND key = 'far';
SELECT outcome, locked_until > now() + interval '98000 years' AS leased_long
  FROM idempotency.reserve('edges', 'far-but-valid', lock_ttl => '100000 years');
-- Its retention counts from the end of that lease: gone, so that no partition is made for it.
SELECT expires_at = locked_until + interval '24 hours' AS from_lease_end
  FROM idempotency.lookup('edges', 'far-but-valid');
SELECT idempotency.forget('edges', 'far-but-valid');
SELECT outcome FROM idempotency.reserve('edges', 'far-wait', wait => '290000 years');
