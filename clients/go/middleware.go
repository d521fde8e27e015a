// The Idempotency-Key header as net/http middleware (func(http.Handler) http.Handler), with the
// answers of the Express middleware:
//   400 missing or malformed key or scope, or a JSON body that is not JSON; 413 a body over
//   the limit; what the handler answers the first time; the stored answer with
//   Idempotent-Replayed: true on a retry; 409 + Retry-After while another request holds the
//   key; 422 when the key was used with another body or is too old; 503 + Retry-After when
//   the database cannot be reached.
// The handler's writes and the stored answer commit in one transaction: the handler runs its
// statements on TxFrom(r.Context()), and its answer is held back until that transaction has
// committed.

package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var (
	uuidHeaderRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	tokenRE      = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`) // visible ASCII, no spaces
)

// KeyHeaderError is a missing or malformed Idempotency-Key header: 400 with {"error": Code}.
type KeyHeaderError struct {
	Code    string // idempotency_key_missing or idempotency_key_malformed
	Message string
}

func (e *KeyHeaderError) Error() string   { return "idempotency: " + e.Message }
func (e *KeyHeaderError) HTTPStatus() int { return 400 }

// ParseIdempotencyKey: a UUID (lower-cased) or a token of 1 to 255 visible ASCII characters;
// the quoted form of the IETF draft ("...") is accepted too.
func ParseIdempotencyKey(raw string) (string, error) {
	if raw == "" {
		return "", &KeyHeaderError{"idempotency_key_missing", "the Idempotency-Key header is required"}
	}
	key := strings.TrimSpace(raw)
	if len(key) >= 2 && strings.HasPrefix(key, `"`) && strings.HasSuffix(key, `"`) {
		key = key[1 : len(key)-1]
	}
	if uuidHeaderRE.MatchString(key) {
		return strings.ToLower(key), nil
	}
	if !tokenRE.MatchString(key) {
		return "", &KeyHeaderError{"idempotency_key_malformed",
			"the Idempotency-Key must be a UUID or 1 to 255 visible ASCII characters"}
	}
	return key, nil
}

// Answer is an HTTP answer: status, JSON body, extra headers.
type Answer struct {
	Status  int
	Body    map[string]string
	Headers map[string]string
}

func problem(status int, code, message string, headers map[string]string) *Answer {
	return &Answer{Status: status, Body: map[string]string{"error": code, "message": message}, Headers: headers}
}

// AnswerFor is the HTTP answer for an error of this package that has one (the key header, a
// malformed key or scope, the reserve outcomes, a lost connection), or nil.
func AnswerFor(err error, now time.Time) *Answer {
	var (
		header    *KeyHeaderError
		malformed *KeyMalformedError
		outcome   *OutcomeError
	)
	switch {
	case errors.As(err, &header):
		return problem(400, header.Code, header.Message, nil)
	case errors.As(err, &malformed):
		return problem(400, malformed.HTTPError(), strings.TrimPrefix(malformed.Error(), "idempotency: "), nil)
	case errors.Is(err, ErrKeyInProgress):
		retry := 1
		if errors.As(err, &outcome) {
			retry = outcome.RetryAfter(now)
		}
		return problem(409, "idempotency_key_in_use",
			"a request with this Idempotency-Key is still being processed; retry later",
			map[string]string{"Retry-After": strconv.Itoa(retry)})
	case errors.Is(err, ErrKeyMismatch):
		return problem(422, "idempotency_key_reused",
			"this Idempotency-Key was already used with a different request body", nil)
	case errors.Is(err, ErrKeyTooOld):
		return problem(422, "idempotency_key_too_old",
			"this Idempotency-Key was created before the retention window, so the request cannot be "+
				"told apart from a new one; check whether the first request took effect, then use a new key", nil)
	case IsConnectionLost(err):
		return problem(503, "database_unavailable",
			"the database could not be reached; retry with the same Idempotency-Key",
			map[string]string{"Retry-After": "1"})
	}
	return nil
}

// WriteAnswer writes a as JSON.
func WriteAnswer(w http.ResponseWriter, a *Answer) {
	body, _ := json.Marshal(a.Body)
	writeJSON(w, a.Status, body, a.Headers)
}

func writeJSON(w http.ResponseWriter, status int, body []byte, headers map[string]string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	for k, v := range headers {
		h.Set(k, v)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// Claim is what the middleware gives the handler through the request's context.
type Claim struct {
	Tx          Querier // the claim's transaction: run the handler's statements here
	Scope, Key  string
	Attempt     int
	Reservation *Reservation
}

type claimKey struct{}

// ClaimFrom is the claim of the request whose context ctx is, or nil outside the middleware.
func ClaimFrom(ctx context.Context) *Claim {
	c, _ := ctx.Value(claimKey{}).(*Claim)
	return c
}

// TxFrom is the claim's transaction (ClaimFrom(ctx).Tx), or nil outside the middleware.
func TxFrom(ctx context.Context) Querier {
	if c := ClaimFrom(ctx); c != nil {
		return c.Tx
	}
	return nil
}

// MiddlewareOptions configure Client.Middleware.
type MiddlewareOptions struct {
	// Scope: whose keys (the account, the tenant); required. An error is answered 401 unless
	// it has an answer of its own (AnswerFor).
	Scope func(r *http.Request) (string, error)
	// Key: default ParseIdempotencyKey of the Idempotency-Key header.
	Key func(r *http.Request) (string, error)
	// Request: what to fingerprint (a JSON text; nil: no check). Default: a JSON body (by its
	// Content-Type) as JSON, any other by its raw bytes.
	Request func(r *http.Request, body []byte) ([]byte, error)
	Exclude []string
	// Limit: the largest body read, in bytes (413 above); default 1 MiB.
	Limit int64
	ReserveOptions
	// Store: whether to store an answer of this status; default below 500 (a 5xx rolls the
	// claim back with the handler's writes, and the retry starts afresh).
	Store func(status int) bool
	// ReplayHeaders: extra headers of a replay (say Location).
	ReplayHeaders func(status int, response json.RawMessage) map[string]string
}

var jsonTypeRE = regexp.MustCompile(`(?i)^(application/json|[a-z]+/[^;\s]+\+json)$`)

func isJSONType(contentType string) bool {
	t, _, err := mime.ParseMediaType(contentType)
	return err == nil && jsonTypeRE.MatchString(t)
}

// heldResponse keeps the handler's answer until the transaction has committed.
type heldResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *heldResponse) Header() http.Header { return h.header }
func (h *heldResponse) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return h.body.Write(b)
}
func (h *heldResponse) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

// storedResponse is the handler's body as it is stored: JSON as JSON, anything else as a JSON
// string, nothing as NULL.
func storedResponse(body []byte) json.RawMessage {
	if len(body) == 0 {
		return nil
	}
	if json.Valid(body) {
		return json.RawMessage(body)
	}
	s, _ := json.Marshal(string(body))
	return s
}

// Middleware is the Idempotency-Key middleware over c's database/sql pool.
func (c *Client) Middleware(o MiddlewareOptions) func(http.Handler) http.Handler {
	if o.Scope == nil {
		panic("idempotency: Middleware needs a Scope")
	}
	keyOf := o.Key
	if keyOf == nil {
		keyOf = func(r *http.Request) (string, error) {
			return ParseIdempotencyKey(r.Header.Get("Idempotency-Key"))
		}
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 1 << 20
	}
	store := o.Store
	if store == nil {
		store = func(status int) bool { return status < 500 }
	}
	hashOf := func(r *http.Request, body []byte) ([]byte, error) {
		if o.Request != nil {
			text, err := o.Request(r, body)
			if err != nil || text == nil {
				return nil, err
			}
			return Fingerprint(text, o.Exclude...)
		}
		if isJSONType(r.Header.Get("Content-Type")) {
			return Fingerprint(body, o.Exclude...)
		}
		sum := sha256.Sum256(body) // as SQL's idempotency.fingerprint(bytea)
		return sum[:], nil
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.serve(w, r, next, o, keyOf, limit, store, hashOf)
		})
	}
}

func (c *Client) serve(w http.ResponseWriter, r *http.Request, next http.Handler, o MiddlewareOptions,
	keyOf func(*http.Request) (string, error), limit int64, store func(int) bool,
	hashOf func(*http.Request, []byte) ([]byte, error)) {
	now := time.Now
	fail := func(err error, otherwise *Answer) {
		if a := AnswerFor(err, now()); a != nil {
			WriteAnswer(w, a)
		} else {
			WriteAnswer(w, otherwise)
		}
	}
	scope, err := o.Scope(r)
	if err != nil {
		fail(err, problem(401, "unauthorized", err.Error(), nil))
		return
	}
	key, err := keyOf(r)
	if err == nil {
		err = CheckNames(scope, key)
	}
	if err != nil {
		fail(err, problem(400, "idempotency_key_malformed", err.Error(), nil))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		WriteAnswer(w, problem(400, "body_unreadable", "the request body could not be read", nil))
		return
	}
	if int64(len(body)) > limit {
		WriteAnswer(w, problem(413, "body_too_large", "the request body is over the limit of the idempotency middleware", nil))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	hash, err := hashOf(r, body)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			WriteAnswer(w, problem(400, "invalid_json", strings.TrimPrefix(e.Error(), "idempotency: "), nil))
		} else {
			WriteAnswer(w, problem(400, "invalid_request", err.Error(), nil))
		}
		return
	}

	s, err := c.session(r.Context())
	if err != nil {
		fail(err, problem(503, "database_unavailable", "the database could not be reached; retry with the same Idempotency-Key",
			map[string]string{"Retry-After": "1"}))
		return
	}
	defer s.release()
	reservation, err := c.claim(r.Context(), s, scope, key, hash, o.ReserveOptions)
	if err != nil {
		s.rollback()
		fail(err, problem(500, "internal_error", "the request failed; retry with the same Idempotency-Key", nil))
		return
	}
	if reservation.Outcome != OutcomeNew {
		// Nothing was written: the transaction BEGIN + reserve opened (if any) is rolled back.
		s.rollback()
		if reservation.Outcome == OutcomeReplay {
			headers := map[string]string{"Idempotent-Replayed": "true"}
			if o.ReplayHeaders != nil {
				for k, v := range o.ReplayHeaders(reservation.StatusCode, reservation.Response) {
					headers[k] = v
				}
			}
			writeJSON(w, reservation.StatusCode, replayBody(reservation.Response), headers)
			return
		}
		fail(outcomeError(scope, key, reservation), nil)
		return
	}

	held := &heldResponse{header: http.Header{}}
	claim := &Claim{Tx: s.conn, Scope: scope, Key: key, Attempt: reservation.Attempt, Reservation: reservation}
	finished := false
	defer func() {
		if !finished { // the handler panicked: nothing of it commits
			s.rollback()
		}
	}()
	next.ServeHTTP(held, r.WithContext(context.WithValue(r.Context(), claimKey{}, claim)))
	finished = true
	status := held.status
	if status == 0 {
		status = http.StatusOK
	}
	// The answer is stored and committed even if the client has gone away meanwhile: a retry
	// then gets it.
	ctx := context.Background()
	var endErr error
	if store(status) {
		endErr = s.finish(ctx, scope, key, status, storedResponse(held.body.Bytes()), reservation.Attempt)
	} else if s.rollback(); s.bad {
		endErr = &Error{Code: CodeConnectionLost, Message: "the connection to the server was lost before the rollback"}
	}
	if endErr != nil {
		log.Printf("idempotency: the answer to key %q was not stored: %v", key, endErr)
		if IsConnectionLost(endErr) {
			fail(endErr, nil) // COMMIT may have happened: the retry replays or runs afresh
		} else {
			WriteAnswer(w, problem(500, "internal_error", "the request failed; retry with the same Idempotency-Key", nil))
		}
		return
	}
	h := w.Header()
	for k, v := range held.header {
		h[k] = v
	}
	w.WriteHeader(status)
	_, _ = w.Write(held.body.Bytes())
}

// replayBody is a stored response as the Express middleware sends it: compact JSON ("null"
// for none).
func replayBody(response json.RawMessage) []byte {
	if response == nil {
		return []byte("null")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, response); err != nil {
		return response
	}
	return b.Bytes()
}
