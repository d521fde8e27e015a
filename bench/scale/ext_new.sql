-- The extension, a new key: reserve, complete (the business work left out: the key table's
-- cost alone); one transaction. Keys numbered per run and client, never loaded ones.
\set n :n + 1
\set i 1000000000 * :run + 10000000 * :client_id + :n
BEGIN;
SELECT outcome FROM idempotency.reserve('bench', bench.key_of(:i, now()), bench.hash_of(:i));
SELECT idempotency.complete('bench', bench.key_of(:i, now()), 200, bench.response_of(:i));
COMMIT;
