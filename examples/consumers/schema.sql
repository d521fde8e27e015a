-- The consumers' database: the extension and the effect of a message (a ledger line).
CREATE EXTENSION IF NOT EXISTS idempotency;
CREATE TABLE IF NOT EXISTS ledger (
  consumer   text        NOT NULL,  -- the consumer group that applied it
  message_id text        NOT NULL,
  account    text        NOT NULL,
  amount     bigint      NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
