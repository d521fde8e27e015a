// The Go client's tests against a database, on pgx v4's stdlib driver and lib/pq: a module of
// its own so that the client's module requires nothing. Built offline against Debian's Go
// sources (/usr/share/gocode) through a vendor folder of links that scripts/go_vendor.py
// writes (scripts/test.sh's go suite); the versions below are Debian 12's.
module github.com/pgidempotency/idempotency/clients/go/drivertest

go 1.19

require (
	github.com/pgidempotency/idempotency/clients/go v0.0.0
	github.com/pgidempotency/idempotency/clients/go/pgxv4 v0.0.0
	github.com/pgidempotency/idempotency/clients/go/idemecho v0.0.0
	github.com/pgidempotency/idempotency/clients/go/idemgin v0.0.0
	github.com/gin-gonic/gin v1.8.1
	github.com/go-chi/chi/v5 v5.0.7
	github.com/jackc/pgx/v4 v4.15.0
	github.com/labstack/echo/v4 v4.2.1
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
	github.com/gin-contrib/sse v0.1.0 // indirect
	github.com/go-playground/locales v0.14.0 // indirect
	github.com/go-playground/universal-translator v0.17.0 // indirect
	github.com/go-playground/validator/v10 v10.4.1 // indirect
	github.com/labstack/gommon v0.2.6 // indirect
	github.com/leodido/go-urn v1.2.1 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.17 // indirect
	github.com/pelletier/go-toml/v2 v2.0.6 // indirect
	github.com/ugorji/go v1.2.8 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	golang.org/x/crypto v0.4.0 // indirect
	golang.org/x/net v0.7.0 // indirect
	golang.org/x/sys v0.3.0 // indirect
	golang.org/x/text v0.7.0 // indirect
	google.golang.org/protobuf v1.28.1 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
)

replace (
	github.com/pgidempotency/idempotency/clients/go => ../
	github.com/pgidempotency/idempotency/clients/go/idemecho => ../idemecho
	github.com/pgidempotency/idempotency/clients/go/idemgin => ../idemgin
	github.com/pgidempotency/idempotency/clients/go/pgxv4 => ../pgxv4
)
