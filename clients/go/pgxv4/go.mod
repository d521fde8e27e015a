module idempotency/pgxv4

go 1.19

require (
	github.com/jackc/pgconn v1.11.0
	github.com/jackc/pgx/v4 v4.15.0
	idempotency v0.0.0
)

replace idempotency => ../
