module idempotency/idemgin

go 1.19

require (
	github.com/gin-gonic/gin v1.8.1
	idempotency v0.0.0
)

replace idempotency => ../
