-- The hand-written pattern, a new key: advisory lock, look up, insert as processing, update
-- to completed (the business work left out); one transaction.
\set n :n + 1
\set i 1000000000 * :run + 10000000 * :client_id + :n
BEGIN;
SELECT pg_advisory_xact_lock(hashtextextended('bench:' || bench.key_of(:i, now()), 0));
SELECT status, response_code, response_body, request_hash FROM bench.hw_keys WHERE scope = 'bench' AND key = bench.key_of(:i, now());
INSERT INTO bench.hw_keys (scope, key, request_hash, status, locked_until) VALUES ('bench', bench.key_of(:i, now()), bench.hash_of(:i), 'processing', now() + interval '5 minutes');
UPDATE bench.hw_keys SET status = 'completed', response_code = 200, response_body = bench.response_of(:i), updated_at = now(), locked_until = NULL WHERE scope = 'bench' AND key = bench.key_of(:i, now());
COMMIT;
