-- W2 extension: reserve (with a fingerprint), the business insert, complete; one transaction.
-- Every key is new (per-client counter).
\set n :n + 1
\set k :run * 1000000000000 + :client_id * 1000000000 + :n
BEGIN;
SELECT outcome FROM idempotency.reserve('bench-w2', :k, idempotency.fingerprint(jsonb_build_object('amount', CAST(:n AS integer))));
INSERT INTO bench.orders (client, amount, note) VALUES (:client_id, :n, 'order');
SELECT idempotency.complete('bench-w2', :k, 201, jsonb_build_object('status', 'created', 'amount', CAST(:n AS integer)));
COMMIT;
