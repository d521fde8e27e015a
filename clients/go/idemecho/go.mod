// The Idempotency-Key middleware for echo v4: a module of its own, so that the client's module
// requires nothing. The versions below are Debian 12's.
module github.com/pgidempotency/idempotency/clients/go/idemecho

go 1.19

require (
	github.com/labstack/echo/v4 v4.2.1
	github.com/pgidempotency/idempotency/clients/go v0.4.0
)

require (
	github.com/labstack/gommon v0.2.6 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.17 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	golang.org/x/crypto v0.4.0 // indirect
	golang.org/x/net v0.7.0 // indirect
	golang.org/x/sys v0.3.0 // indirect
	golang.org/x/text v0.7.0 // indirect
)

// Within this repository the adapter builds against the core beside it.
replace github.com/pgidempotency/idempotency/clients/go => ../
