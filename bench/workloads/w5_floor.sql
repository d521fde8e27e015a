-- W5 floor: W2's reads and writes as plain SQL, with nothing else: the key probe, the business
-- insert, the finished key row; no lock, no checks. Not a correct idempotency layer (two
-- concurrent requests with one key would both run): what W2's statements cost without the
-- extension's logic.
\set n :n + 1
\set k :run * 1000000000000 + :client_id * 1000000000 + :n
BEGIN;
SELECT state, attempt, request_hash, status_code, response FROM bench.key_floor WHERE key = :k::text AND scope = 'bench-w5' AND expires_at > now();
INSERT INTO bench.orders (client, amount, note) VALUES (:client_id, :n, 'order');
INSERT INTO bench.key_floor (scope, key, state, attempt, request_hash, status_code, response, first_seen_at, completed_at, expires_at) VALUES ('bench-w5', :k, 'completed', 1, sha256(convert_to(jsonb_build_object('amount', CAST(:n AS integer))::text, 'UTF8')), 201, jsonb_build_object('status', 'created', 'amount', CAST(:n AS integer)), now(), now(), now() + interval '24 hours');
COMMIT;
