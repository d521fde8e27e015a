// The Go client's tests against a database, on pgx v4's stdlib driver and lib/pq: a module of
// its own so that the client's module requires nothing. Built offline against Debian's Go
// sources (/usr/share/gocode) through a vendor folder of links that scripts/go_vendor.py
// writes (scripts/test.sh's go suite); the versions below are Debian 12's.
module github.com/pgidempotency/idempotency/clients/go/drivertest

go 1.19

require (
	github.com/pgidempotency/idempotency/clients/go v0.0.0
	github.com/pgidempotency/idempotency/clients/go/pgxv4 v0.0.0
	github.com/jackc/pgx/v4 v4.15.0
	github.com/lib/pq v1.10.7
)

require (
	github.com/jackc/chunkreader/v2 v2.0.1 // indirect
	github.com/jackc/pgconn v1.11.0 // indirect
	github.com/jackc/pgio v1.0.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgproto3/v2 v2.2.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20200714003250-2b9c44734f2b // indirect
	github.com/jackc/pgtype v1.10.0 // indirect
	golang.org/x/crypto v0.4.0 // indirect
	golang.org/x/text v0.7.0 // indirect
)

replace (
	github.com/pgidempotency/idempotency/clients/go => ../
	github.com/pgidempotency/idempotency/clients/go/pgxv4 => ../pgxv4
)
