// Package idemecho is the Idempotency-Key middleware for echo v4 (github.com/labstack/echo),
// whose handlers are not net/http handlers: the same answers, claim and transaction as
// idempotency.Client.Middleware, which it runs around the rest of echo's chain.
//
//	e := echo.New()
//	e.POST("/orders", createOrder, idemecho.Middleware(client, idempotency.MiddlewareOptions{Scope: scope}))
//
// A handler runs its statements on idempotency.TxFrom(c.Request().Context()); its answer is
// held back until the claim's transaction has committed, and stored for the retries. An error
// it returns is answered by echo's HTTPErrorHandler inside the claim, so the error's answer is
// stored (below 500) or rolled back with the handler's writes (5xx) like any other.
package idemecho

import (
	"net/http"

	"github.com/labstack/echo/v4"

	idempotency "github.com/pgidempotency/idempotency/clients/go"
)

// Middleware is c.Middleware(o) as echo middleware. The handler runs only for a new key
// (never with the Statement option).
func Middleware(c *idempotency.Client, o idempotency.MiddlewareOptions) echo.MiddlewareFunc {
	mw := c.Middleware(o)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			res := ec.Response()
			outer := res.Writer
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ec.SetRequest(r)
				res.Writer = w
				defer func() {
					// the middleware answers the client afterwards, through the same Response
					res.Writer, res.Committed, res.Status, res.Size = outer, false, 0, 0
				}()
				if err := next(ec); err != nil {
					ec.Error(err)
				}
			})
			mw(handler).ServeHTTP(res, ec.Request())
			return nil
		}
	}
}
