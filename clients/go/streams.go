// Streams: accept and watermark (a consumer's position per partition, by offset or by a
// 128-bit key written as a UUID) and next_key.

package idempotency

import (
	"context"
	"database/sql"
	"math/big"
	"regexp"
	"strings"
)

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$`)

// Position is a stream position for Accept: an int64 offset (PositionInt) or a 128-bit one
// written as a UUID (PositionUUID, say an outbox key).
type Position struct {
	text string
	uuid bool
}

// PositionInt is a bigint position (a Kafka offset).
func PositionInt(offset int64) Position { return Position{text: big.NewInt(offset).String()} }

// PositionUUID is a 128-bit position as a UUID string; ok is false for a text that is not one.
func PositionUUID(u string) (Position, bool) {
	if !uuidRE.MatchString(u) {
		return Position{}, false
	}
	return Position{text: strings.ToLower(u), uuid: true}, true
}

func (p Position) String() string { return p.text }

// value is the position as an unsigned number (a UUID's 128 bits), for comparisons.
func (p Position) value() *big.Int {
	v := new(big.Int)
	if p.uuid {
		v.SetString(strings.ReplaceAll(p.text, "-", ""), 16)
	} else {
		v.SetString(p.text, 10)
	}
	return v
}

func acceptStatement(p Position) string {
	if p.uuid {
		return sqlAcceptUUID
	}
	return sqlAcceptBigint
}

// Accept is idempotency.accept: true if position is above the partition's watermark (which
// moves there, in the caller's transaction), false for a duplicate.
func Accept(ctx context.Context, q Querier, consumer, partition string, position Position) (bool, error) {
	var accepted bool
	err := queryRow(ctx, q, acceptStatement(position), []interface{}{consumer, partition, position.text}, &accepted)
	return accepted, err
}

// Watermark is the stored position of a partition as an unsigned number (a 128-bit one for
// UUID positions), or nil.
func Watermark(ctx context.Context, q Querier, consumer, partition string) (*big.Int, error) {
	var w sql.NullString
	if err := queryRow(ctx, q, sqlWatermark, []interface{}{consumer, partition}, &w); err != nil {
		return nil, err
	}
	if !w.Valid {
		return nil, nil
	}
	v, _ := new(big.Int).SetString(w.String, 10)
	return v, nil
}

// NextKey is idempotency.next_key: monotonic across sessions, gaps allowed.
func NextKey(ctx context.Context, q Querier, stream string) (int64, error) {
	var k int64
	err := queryRow(ctx, q, sqlNextKey, []interface{}{stream}, &k)
	return k, err
}
