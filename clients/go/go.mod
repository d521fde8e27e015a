module github.com/pgidempotency/idempotency/clients/go

go 1.19
