-- The hand-written pattern, a replay drawn as retries arrive (as ext_recent.sql): the lock,
-- the key's row read; one transaction.
\set r random(1, 100)
\if :r <= 90
\set i random(:keys - :recent + 1, :keys)
\else
\set i random(1, :keys)
\endif
BEGIN;
SELECT pg_advisory_xact_lock(hashtextextended('bench:' || bench.key_of(:i, bench.seen_at(:i)), 0));
SELECT status, response_code, response_body, request_hash FROM bench.hw_keys WHERE scope = 'bench' AND key = bench.key_of(:i, bench.seen_at(:i));
COMMIT;
