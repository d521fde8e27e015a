-- W1 hand-written pattern from the usual guides: advisory lock, look the key up, insert it
-- as processing, the business insert, update the key to completed; one transaction.
-- Every key is new (per-client counter), so the lookup finds nothing.
\set n :n + 1
\set k :run * 1000000000000 + :client_id * 1000000000 + :n
BEGIN;
SELECT pg_advisory_xact_lock(hashtextextended('bench-w1:' || :k, 0));
SELECT status, response_code, response_body, request_hash FROM bench.idempotency_keys WHERE scope = 'bench-w1' AND key = :k;
INSERT INTO bench.idempotency_keys (scope, key, request_hash, status, locked_until) VALUES ('bench-w1', :k, sha256(convert_to(jsonb_build_object('amount', CAST(:n AS integer))::text, 'UTF8')), 'processing', now() + interval '5 minutes');
INSERT INTO bench.orders (client, amount, note) VALUES (:client_id, :n, 'order');
UPDATE bench.idempotency_keys SET status = 'completed', response_code = 201, response_body = jsonb_build_object('status', 'created', 'amount', CAST(:n AS integer)), updated_at = now(), locked_until = NULL WHERE scope = 'bench-w1' AND key = :k;
COMMIT;
