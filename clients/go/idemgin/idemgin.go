// Package idemgin is the Idempotency-Key middleware for gin (github.com/gin-gonic/gin), whose
// handlers are not net/http handlers: the same answers, claim and transaction as
// idempotency.Client.Middleware, which it runs around the rest of gin's chain.
//
//	r := gin.New()
//	r.POST("/orders", idemgin.Middleware(client, idempotency.MiddlewareOptions{Scope: scope}), createOrder)
//
// A handler runs its statements on idempotency.TxFrom(c.Request.Context()); its answer (what it
// writes through c.Writer: c.JSON, c.String, ...) is held back until the claim's transaction
// has committed, and stored for the retries.
package idemgin

import (
	"bufio"
	"errors"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	idempotency "github.com/pgidempotency/idempotency/clients/go"
)

// Middleware is c.Middleware(o) as a gin handler. The handlers after it run only for a new
// key (never with the Statement option); on any other answer the chain is aborted.
func Middleware(c *idempotency.Client, o idempotency.MiddlewareOptions) gin.HandlerFunc {
	mw := c.Middleware(o)
	return func(ctx *gin.Context) {
		ran := false
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			outer := ctx.Writer
			ctx.Request = r
			ctx.Writer = &heldWriter{ResponseWriter: w, status: http.StatusOK, size: -1}
			defer func() { ctx.Writer = outer }()
			ctx.Next()
		})
		mw(next).ServeHTTP(ctx.Writer, ctx.Request)
		if !ran {
			ctx.Abort()
		}
	}
}

// heldWriter is gin's ResponseWriter over the middleware's held answer: the status is sent
// with the first byte of the body (or WriteHeaderNow), as gin's own writer does; the answer
// goes to the client only once the transaction has committed, so it cannot be hijacked or
// flushed early.
type heldWriter struct {
	http.ResponseWriter
	status, size int
}

var _ gin.ResponseWriter = (*heldWriter)(nil)

func (w *heldWriter) WriteHeader(code int) {
	if code > 0 && !w.Written() {
		w.status = code
	}
}

func (w *heldWriter) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
		w.ResponseWriter.WriteHeader(w.status)
	}
}

func (w *heldWriter) Write(b []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.ResponseWriter.Write(b)
	w.size += n
	return n, err
}

func (w *heldWriter) WriteString(s string) (int, error) { return w.Write([]byte(s)) }
func (w *heldWriter) Status() int                       { return w.status }
func (w *heldWriter) Size() int                         { return w.size }
func (w *heldWriter) Written() bool                     { return w.size != -1 }
func (w *heldWriter) Flush()                            { w.WriteHeaderNow() }
func (w *heldWriter) Pusher() http.Pusher               { return nil }

// CloseNotify: never, as the held answer outlives the client (it is stored even when the
// client has gone).
func (w *heldWriter) CloseNotify() <-chan bool { return make(chan bool) }

// Hijack: refused, the answer being held for the transaction.
func (w *heldWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("idemgin: an answer held for its transaction cannot be hijacked")
}
