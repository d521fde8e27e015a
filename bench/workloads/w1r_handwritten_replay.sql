-- W1R hand-written replay: the hand-written pattern (W1) answering a retry of a key completed
-- during setup: the advisory lock, the key's row read (the application compares the request
-- hash and sends the stored answer); one transaction.
\set i random(1, :w3keys)
BEGIN;
SELECT pg_advisory_xact_lock(hashtextextended('bench-w1-seed:' || :i, 0));
SELECT status, response_code, response_body, request_hash FROM bench.idempotency_keys WHERE scope = 'bench-w1-seed' AND key = :i;
COMMIT;
