module idempotency/idemecho

go 1.19

require (
	github.com/labstack/echo/v4 v4.2.1
	idempotency v0.0.0
)

replace idempotency => ../
