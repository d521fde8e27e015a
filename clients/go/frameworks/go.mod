module idempotency/frameworks

go 1.19

require (
	github.com/gin-gonic/gin v1.8.1
	github.com/go-chi/chi/v5 v5.0.7
	github.com/jackc/pgx/v4 v4.15.0
	github.com/labstack/echo/v4 v4.2.1
	idempotency v0.0.0
	idempotency/idemecho v0.0.0
	idempotency/idemgin v0.0.0
)

replace (
	idempotency => ../
	idempotency/idemecho => ../idemecho
	idempotency/idemgin => ../idemgin
)
