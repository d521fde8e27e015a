-- W4 mixed: W2, but 10% of requests repeat a key this client completed earlier; a repeat is
-- answered by reserve alone (outcome 'replay'), as an application would.
\set r random(1, 100)
\if :r <= 10 AND :n > 0
\set j random(1, :n)
\set k :run * 1000000000000 + :client_id * 1000000000 + :j
SELECT outcome, status_code, response FROM idempotency.reserve('bench-w4', :k, idempotency.fingerprint(jsonb_build_object('amount', CAST(:j AS integer))));
\else
\set n :n + 1
\set k :run * 1000000000000 + :client_id * 1000000000 + :n
BEGIN;
SELECT outcome FROM idempotency.reserve('bench-w4', :k, idempotency.fingerprint(jsonb_build_object('amount', CAST(:n AS integer))));
INSERT INTO bench.orders (client, amount, note) VALUES (:client_id, :n, 'order');
SELECT idempotency.complete('bench-w4', :k, 201, jsonb_build_object('status', 'created', 'amount', CAST(:n AS integer)));
COMMIT;
\endif
