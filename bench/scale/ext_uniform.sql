-- The extension, a replay of a key drawn uniformly from every loaded key (the cold worst case).
\set i random(1, :keys)
SELECT outcome, status_code, response FROM idempotency.reserve('bench', bench.key_of(:i, bench.seen_at(:i)), bench.hash_of(:i));
