-- The hand-written pattern, a replay of a key drawn uniformly from every loaded key.
\set i random(1, :keys)
BEGIN;
SELECT pg_advisory_xact_lock(hashtextextended('bench:' || bench.key_of(:i, bench.seen_at(:i)), 0));
SELECT status, response_code, response_body, request_hash FROM bench.hw_keys WHERE scope = 'bench' AND key = bench.key_of(:i, bench.seen_at(:i));
COMMIT;
