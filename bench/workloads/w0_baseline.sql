-- W0 baseline: one business row insert per transaction, no idempotency.
\set amount random(1, 100000)
BEGIN;
INSERT INTO bench.orders (client, amount, note) VALUES (:client_id, :amount, 'order');
COMMIT;
