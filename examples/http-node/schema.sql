-- Tables of the orders examples: the Node server (under an advisory lock, so servers starting
-- together do not race), examples/http-go, examples/http-java and examples/http-nestjs apply
-- this file at start; every statement may run again.
CREATE EXTENSION IF NOT EXISTS idempotency;

-- Deliberately no unique constraint on (account, idempotency_key): the extension is the only
-- thing that keeps a retried request from creating a second order, and the tests count rows.
CREATE TABLE IF NOT EXISTS orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account text NOT NULL,
    idempotency_key text NOT NULL,
    item text NOT NULL,
    quantity integer NOT NULL CHECK (quantity > 0),
    total_cents bigint NOT NULL,
    note text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS orders_account_key ON orders (account, idempotency_key);
