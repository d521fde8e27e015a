-- The extension, a replay drawn as retries arrive: 90% of the keys from the last five
-- minutes' (:recent newest loaded keys), 10% from any loaded key; reserve answers 'replay'.
\set r random(1, 100)
\if :r <= 90
\set i random(:keys - :recent + 1, :keys)
\else
\set i random(1, :keys)
\endif
SELECT outcome, status_code, response FROM idempotency.reserve('bench', bench.key_of(:i, bench.seen_at(:i)), bench.hash_of(:i));
