// The Idempotency-Key middleware for gin: a module of its own, so that the client's module
// requires nothing. The versions below are Debian 12's.
module github.com/pgidempotency/idempotency/clients/go/idemgin

go 1.19

require (
	github.com/gin-gonic/gin v1.8.1
	github.com/pgidempotency/idempotency/clients/go v0.4.0
)

require (
	github.com/gin-contrib/sse v0.1.0 // indirect
	github.com/go-playground/locales v0.14.0 // indirect
	github.com/go-playground/universal-translator v0.17.0 // indirect
	github.com/go-playground/validator/v10 v10.4.1 // indirect
	github.com/leodido/go-urn v1.2.1 // indirect
	github.com/mattn/go-isatty v0.0.17 // indirect
	github.com/pelletier/go-toml/v2 v2.0.6 // indirect
	github.com/ugorji/go v1.2.8 // indirect
	golang.org/x/crypto v0.4.0 // indirect
	golang.org/x/net v0.7.0 // indirect
	golang.org/x/sys v0.3.0 // indirect
	golang.org/x/text v0.7.0 // indirect
	google.golang.org/protobuf v1.28.1 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
)

// Within this repository the adapter builds against the core beside it.
replace github.com/pgidempotency/idempotency/clients/go => ../
