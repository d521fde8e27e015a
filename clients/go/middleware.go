// The Idempotency-Key header as net/http middleware (func(http.Handler) http.Handler), with the
// answers of the Express middleware:
//   400 missing or malformed key or scope, or a JSON body that is not JSON; 413 a body over
//   the limit; what the handler answers the first time; the stored answer with
//   Idempotent-Replayed: true on a retry (its status, kept headers and body as they were); 409 + Retry-After while another request holds the
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
	"encoding/base64"
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
	"unicode/utf8"
)

// KeyHeaderError is a missing or malformed Idempotency-Key header (or a missing scope): 400
// with Code as the answer's "error".
type KeyHeaderError struct {
	Code    string // idempotency_key_missing or idempotency_key_malformed
	Message string
}

func (e *KeyHeaderError) Error() string   { return "idempotency: " + e.Message }
func (e *KeyHeaderError) HTTPStatus() int { return 400 }

// Is matches the HeaderSentinel of its code.
func (e *KeyHeaderError) Is(target error) bool {
	t, ok := target.(HeaderSentinel)
	return ok && string(t) == e.Code
}

// HeaderSentinel is a code of a 400 answer about the request's key or scope as an error: a
// constant, so nothing a program does can change what errors.Is matches; it matches itself and
// a *KeyHeaderError of its code.
type HeaderSentinel string

func (s HeaderSentinel) Error() string   { return "idempotency: " + problemAnswers[string(s)].detail }
func (s HeaderSentinel) HTTPStatus() int { return 400 }

// ErrScopeMissing: what a Scope function returns when the request does not say whose it is (a
// header it reads is missing); answered 400 idempotency_scope_missing.
const ErrScopeMissing = HeaderSentinel("idempotency_scope_missing")

// Answer is one of the middleware's own answers: status, the {"error": code, "message": ...}
// of its legacy body, extra headers. It is sent as RFC 9457 problem details (Write).
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
		sentinel  HeaderSentinel
		malformed *KeyMalformedError
		outcome   *OutcomeError
	)
	switch {
	case errors.As(err, &header):
		return problem(400, header.Code, header.Message, nil)
	case errors.As(err, &sentinel):
		return fixedProblem(string(sentinel), nil)
	case errors.As(err, &malformed):
		return problem(400, malformed.HTTPError(), strings.TrimPrefix(malformed.Error(), "idempotency: "), nil)
	case errors.Is(err, ErrKeyInProgress):
		retry := 1
		if errors.As(err, &outcome) {
			retry = outcome.RetryAfter(now)
		}
		return fixedProblem("idempotency_key_in_use", map[string]string{"Retry-After": strconv.Itoa(retry)})
	case errors.Is(err, ErrKeyMismatch):
		return fixedProblem("idempotency_key_reused", nil)
	case errors.Is(err, ErrKeyTooOld):
		return fixedProblem("idempotency_key_too_old", nil)
	case IsConnectionLost(err):
		return fixedProblem("database_unavailable", map[string]string{"Retry-After": "1"})
	}
	return nil
}

// WriteAnswer writes a as problem details, as the middleware does by default.
func WriteAnswer(w http.ResponseWriter, a *Answer) { a.Write(w, AnswerOptions{}) }

func writeBody(w http.ResponseWriter, status int, contentType string, body []byte, headers map[string]string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
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
	// Scope: whose keys (the account, the tenant); required. ErrScopeMissing is answered 400
	// idempotency_scope_missing; another error 401 unless it has an answer of its own
	// (AnswerFor).
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
	// KeepHeaders: names of headers of the first answer that its replays carry besides
	// Content-Type and Location (say ETag).
	KeepHeaders []string
	// ReplayHeaders: extra headers of a replay; response is Replay.Value (the JSON body, or the
	// text as a JSON string; nil for bytes or no body).
	ReplayHeaders func(status int, response json.RawMessage) map[string]string
	// Answers: how the middleware's own answers are sent.
	Answers AnswerOptions
	// Statement: answer each new key with one statement instead of the handler (which is
	// then never called, and may be nil): claim, statement and answer in one round trip
	// (ExecuteOnce in autocommit). See StatementOptions.
	Statement *StatementOptions
	// Logger: where the middleware reports what it cannot answer with (an answer that could
	// not be stored, a statement that failed); default log.Default(). A *log.Logger is one.
	Logger Logger
}

// Logger is what the middleware logs to: a *log.Logger, or an adapter to another logger.
type Logger interface {
	Printf(format string, v ...interface{})
}

func (o *MiddlewareOptions) logger() Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return log.Default()
}

// StatementOptions: the statement of Middleware's Statement option (one SELECT, INSERT,
// UPDATE, DELETE or MERGE with $1, $2, ...), Params: its parameters from the request and
// its body (converted as StatementParams says; an error is answered 400 invalid_request; nil
// for a statement without parameters), and Status: the status of its answer (0: 201). A new
// key is answered with that status and the statement's response as the JSON body (its one row
// as a JSON object, a single json / jsonb column as it is; no row: an empty body); a retry
// gets the same answer with Idempotent-Replayed: true. An error of the statement answers 500 and leaves the key new; a
// server without execute_once answers 500 and logs ErrUndefinedFunction naming it.
type StatementOptions struct {
	SQL    string
	Params func(r *http.Request, body []byte) ([]interface{}, error)
	Status int
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

// StoredMark is the member that marks a stored answer of the middlewares.
const StoredMark = "idempotency_http"

var keptHeaders = []string{"content-type", "location"}

// StoredAnswer is what complete() stores for an answer: {"idempotency_http": 1, "headers":
// {...}, and the body as one of "body" (the JSON value of a JSON answer), "text" (any other
// UTF-8 text) or "base64" (other bytes); none for an empty body}. The headers (lower-case
// names, the values of one name joined by ", ") are Content-Type, Location and those named in
// keep. The Node and Python middlewares store the same (test/vectors/http_answers.json).
func StoredAnswer(body []byte, header http.Header, keep []string) json.RawMessage {
	wanted := map[string]bool{}
	for _, name := range keptHeaders {
		wanted[name] = true
	}
	for _, name := range keep {
		wanted[strings.ToLower(name)] = true
	}
	kept := map[string]string{}
	for name, values := range header {
		lower := strings.ToLower(name)
		if _, seen := kept[lower]; wanted[lower] && !seen && len(values) > 0 {
			kept[lower] = strings.Join(values, ", ")
		}
	}
	stored := map[string]any{StoredMark: 1, "headers": kept}
	switch {
	case len(body) == 0:
	case !utf8.Valid(body):
		stored["base64"] = base64.StdEncoding.EncodeToString(body)
	case isJSONType(kept["content-type"]) && json.Valid(body):
		stored["body"] = json.RawMessage(body)
	default: // not JSON, or sent as JSON but not JSON: kept as its text
		stored["text"] = string(body)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(stored) // strings, and a body json.Valid accepted: cannot fail
	return bytes.TrimRight(b.Bytes(), "\n")
}

// Replay is a stored answer as a replay sends it: the stored headers (lower-case names), the
// body's bytes, and Value (the JSON body, or the text as a JSON string; nil for bytes or no
// body) for the ReplayHeaders option.
type Replay struct {
	Headers map[string]string
	Body    []byte
	Value   json.RawMessage
}

// ReplayOf is the replay of what complete() stored. A value stored without the mark (before
// it existed, or by IdempotencyClient-style code) is a JSON body, replayed as
// application/json; none (SQL NULL) as an empty one.
func ReplayOf(response json.RawMessage) Replay {
	var stored map[string]json.RawMessage
	trimmed := bytes.TrimLeft(response, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '{' && json.Unmarshal(response, &stored) == nil &&
		string(stored[StoredMark]) == "1" {
		r := Replay{Headers: map[string]string{}, Body: []byte{}}
		_ = json.Unmarshal(stored["headers"], &r.Headers)
		if raw, ok := stored["body"]; ok {
			r.Body = compactJSON(raw)
			r.Value = r.Body
		} else if raw, ok := stored["text"]; ok {
			var text string
			_ = json.Unmarshal(raw, &text)
			r.Body, r.Value = []byte(text), raw
		} else if raw, ok := stored["base64"]; ok {
			var text string
			_ = json.Unmarshal(raw, &text)
			r.Body, _ = base64.StdEncoding.DecodeString(text)
		}
		return r
	}
	r := Replay{Headers: map[string]string{"content-type": "application/json"}, Body: []byte{}}
	if response != nil && string(response) != "null" {
		r.Body = compactJSON(response)
		r.Value = r.Body
	}
	return r
}

// compactJSON is a JSON text as JSON.stringify of its value writes it (the Node middleware's
// replay): no white space between tokens, strings with only the escapes they need (", \ and
// the control characters), numbers and the order of members as they are.
func compactJSON(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	in := b.Bytes()
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); i++ {
		if in[i] != '"' {
			out = append(out, in[i])
			continue
		}
		end := i + 1
		for in[end] != '"' {
			if in[end] == '\\' {
				end++
			}
			end++
		}
		var s string
		if json.Unmarshal(in[i:end+1], &s) != nil {
			return in
		}
		out = appendJSString(out, s)
		i = end
	}
	return out
}

func appendJSString(out []byte, s string) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			if c < 0x20 {
				out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			} else {
				out = append(out, c)
			}
		}
	}
	return append(out, '"')
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
			a.Write(w, o.Answers)
		} else {
			otherwise.Write(w, o.Answers)
		}
	}
	scope, err := o.Scope(r)
	if errors.Is(err, ErrScopeMissing) {
		err = ErrScopeMissing // its answer, whatever the Scope function wrapped it in
	}
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
		problem(400, "body_unreadable", "the request body could not be read", nil).Write(w, o.Answers)
		return
	}
	if int64(len(body)) > limit {
		fixedProblem("body_too_large", nil).Write(w, o.Answers)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	hash, err := hashOf(r, body)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			fixedProblem("invalid_json", nil).Write(w, o.Answers)
		} else {
			problem(400, "invalid_request", err.Error(), nil).Write(w, o.Answers)
		}
		return
	}

	var seen *servedClaim
	if c.Observer != nil {
		seen = &servedClaim{ResponseWriter: w}
		w = seen
		r = r.WithContext(countingRoundTrips(r.Context()))
		defer func(start time.Time) { c.observeServed(r.Context(), scope, key, start, seen) }(time.Now())
	}
	if o.Statement != nil {
		c.serveStatement(w, r, o, scope, key, hash, body, seen)
		return
	}

	s, err := c.session(r.Context())
	if err != nil {
		fail(err, fixedProblem("database_unavailable", map[string]string{"Retry-After": "1"}))
		return
	}
	defer s.release()
	reservation, err := c.claim(r.Context(), s, scope, key, hash, o.ReserveOptions)
	if err != nil {
		s.rollback()
		fail(err, fixedProblem("internal_error", nil))
		return
	}
	seen.saw(reservation)
	if reservation.Outcome != OutcomeNew {
		// Nothing was written: the transaction BEGIN + reserve opened (if any) is rolled back.
		s.rollback()
		if reservation.Outcome == OutcomeReplay {
			writeStored(w, reservation, o, true)
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
	ctx := s.background
	var endErr error
	if held.body.Len() > 0 && held.header.Get("Content-Type") == "" {
		if _, set := held.header["Content-Type"]; !set {
			// what net/http sends for it, and so what the client reads and a replay repeats
			held.header.Set("Content-Type", http.DetectContentType(held.body.Bytes()))
		}
	}
	if store(status) {
		stored := StoredAnswer(held.body.Bytes(), held.header, o.KeepHeaders)
		endErr = s.finish(ctx, scope, key, status, stored, reservation.Attempt)
	} else if s.rollback(); s.bad {
		endErr = &Error{Code: CodeConnectionLost, Message: "the connection to the server was lost before the rollback"}
	}
	if endErr != nil {
		o.logger().Printf("idempotency: the answer to key %q was not stored: %v", key, endErr)
		if IsConnectionLost(endErr) {
			fail(endErr, nil) // COMMIT may have happened: the retry replays or runs afresh
		} else {
			fixedProblem("internal_error", nil).Write(w, o.Answers)
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

// writeStored writes a stored answer (a replay, or the answer execute_once stored just now):
// its status, headers and body, with Idempotent-Replayed: true for a replay.
func writeStored(w http.ResponseWriter, reservation *Reservation, o MiddlewareOptions, replayed bool) {
	replay := ReplayOf(reservation.Response)
	h := w.Header()
	for k, v := range replay.Headers {
		h.Set(k, v)
	}
	if h.Get("Content-Type") == "" {
		h["Content-Type"] = nil // as it was: net/http does not guess one
	}
	h.Set("Content-Length", strconv.Itoa(len(replay.Body)))
	if replayed {
		h.Set("Idempotent-Replayed", "true")
		if o.ReplayHeaders != nil {
			for k, v := range o.ReplayHeaders(reservation.StatusCode, replay.Value) {
				h.Set(k, v)
			}
		}
	}
	w.WriteHeader(reservation.StatusCode)
	_, _ = w.Write(replay.Body)
}

// serveStatement answers a request with the Statement option: execute_once on the pool in
// autocommit (one round trip), then the statement's answer, the replay, or the outcome's
// refusal.
func (c *Client) serveStatement(w http.ResponseWriter, r *http.Request, o MiddlewareOptions, scope, key string,
	hash, body []byte, seen *servedClaim) {
	st := o.Statement
	var params []interface{}
	if st.Params != nil { // none: a statement without parameters
		var err error
		if params, err = st.Params(r, body); err != nil {
			problem(400, "invalid_request", err.Error(), nil).Write(w, o.Answers)
			return
		}
	}
	reservation, err := ExecuteOnce(r.Context(), c.DB, scope, key, hash, st.SQL, params,
		ExecuteOptions{StatusCode: st.Status, ReserveOptions: o.ReserveOptions})
	if err != nil {
		err = translate(err)
		if IsConnectionLost(err) {
			AnswerFor(err, time.Now()).Write(w, o.Answers)
			return
		}
		o.logger().Printf("idempotency: the statement of key %q failed: %v", key, err)
		fixedProblem("internal_error", nil).Write(w, o.Answers)
		return
	}
	seen.saw(reservation)
	switch reservation.Outcome {
	case OutcomeNew, OutcomeReplay:
		writeStored(w, reservation, o, reservation.Outcome == OutcomeReplay)
	default:
		AnswerFor(outcomeError(scope, key, reservation), time.Now()).Write(w, o.Answers)
	}
}
