module idempotency

go 1.19
