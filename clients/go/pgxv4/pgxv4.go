// Package pgxv4 lets the idempotency package send several statements in one round trip on a
// connection of pgx v4's database/sql driver (github.com/jackc/pgx/v4/stdlib): complete and
// COMMIT together, as the Node and Python clients do. Import it for its effect:
//
//	import _ "idempotency/pgxv4"
//
// Parameters stay bound (the extended protocol's Bind, in text format); nothing is inlined.
package pgxv4

import (
	"context"
	"database/sql/driver"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4/stdlib"

	"github.com/pgidempotency/idempotency/clients/go"
)

func init() { idempotency.RegisterPipeliner(Pipeline) }

// Pipeline is the Pipeliner for pgx v4's stdlib connections (and for wrappers of one that
// give it with Unwrap() driver.Conn).
func Pipeline(ctx context.Context, driverConn interface{}, statements []idempotency.Statement) ([]idempotency.StatementResult, bool, error) {
	for {
		if w, ok := driverConn.(interface{ Unwrap() driver.Conn }); ok {
			driverConn = w.Unwrap()
			continue
		}
		break
	}
	c, ok := driverConn.(*stdlib.Conn)
	if !ok {
		return nil, false, nil
	}
	batch := &pgconn.Batch{}
	for _, s := range statements {
		params := make([][]byte, len(s.Args))
		for i, a := range s.Args {
			if a != nil {
				params[i] = []byte(*a)
			}
		}
		batch.ExecParams(s.SQL, params, nil, nil, nil)
	}
	results, err := c.Conn().PgConn().ExecBatch(ctx, batch).ReadAll()
	if err != nil {
		return nil, true, err
	}
	out := make([]idempotency.StatementResult, len(results))
	for i, r := range results {
		if r.Err != nil {
			return nil, true, r.Err
		}
		out[i] = idempotency.StatementResult{Rows: r.Rows, Tag: r.CommandTag.String()}
	}
	return out, true, nil
}
