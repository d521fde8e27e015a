-- The NestJS orders example's table (applied at start; may run again). No unique constraint on
-- (account, idempotency_key): the extension alone keeps a retry from making a second order.
CREATE EXTENSION IF NOT EXISTS idempotency;
CREATE TABLE IF NOT EXISTS orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account text NOT NULL,
    idempotency_key text NOT NULL,
    item text NOT NULL,
    quantity integer NOT NULL CHECK (quantity > 0),
    total_cents bigint NOT NULL
);
