package idempotency

import (
	"encoding/json"
	"net/http"
)

// ProblemTypeBase is where the problem types of the middleware's answers are documented: an
// answer's "type" is ProblemTypeBase followed by its code (docs/http.md, one section a code).
const ProblemTypeBase = "https://github.com/pgidempotency/idempotency/blob/main/docs/http.md#"

// ProblemTitles: the "title" of the problem details answered for each code, those of every
// client's middleware (test/vectors/http_answers.json).
var ProblemTitles = map[string]string{
	"idempotency_key_missing":     "Idempotency-Key is missing",
	"idempotency_key_malformed":   "Idempotency-Key is malformed",
	"idempotency_scope_missing":   "Idempotency scope is missing",
	"idempotency_scope_malformed": "Idempotency scope is malformed",
	"invalid_json":                "Request body is not JSON",
	"invalid_request":             "Request is invalid",
	"body_unreadable":             "Request body could not be read",
	"body_too_large":              "Request body is too large",
	"unauthorized":                "Request is not authorized",
	"idempotency_key_in_use":      "A request is outstanding for this Idempotency-Key",
	"idempotency_key_reused":      "Idempotency-Key is already used",
	"idempotency_key_too_old":     "Idempotency-Key is too old",
	"idempotency_key_conflict":    "Idempotency-Key conflict",
	"database_unavailable":        "Database is unavailable",
	"internal_error":              "Request failed",
}

// AnswerOptions: how the middleware sends its own answers (never a replay, which is the first
// answer as it was).
type AnswerOptions struct {
	// Documentation: the address of the service's idempotency documentation; every answer of
	// the middleware then carries Link: <Documentation>; rel="describedby", as the IETF draft
	// suggests.
	Documentation string
	// Legacy: the body of releases before 0.4.0, {"error": code, "message": ...} as
	// application/json, instead of problem details.
	Legacy bool
}

// problemDetails is an RFC 9457 body, members in this order; Error is an extension member, the
// code of the legacy body.
type problemDetails struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Error  string `json:"error"`
}

// Write sends a: by default as RFC 9457 problem details (Content-Type
// application/problem+json; type ProblemTypeBase + code, title, status, detail, and the code as
// the extension member "error"), with o.Legacy the legacy body.
func (a *Answer) Write(w http.ResponseWriter, o AnswerOptions) {
	code, message := a.Body["error"], a.Body["message"]
	contentType, body := "application/problem+json", []byte(nil)
	if o.Legacy {
		contentType = "application/json"
		body, _ = json.Marshal(a.Body)
	} else {
		title, ok := ProblemTitles[code]
		if !ok {
			title = http.StatusText(a.Status)
		}
		body, _ = json.Marshal(problemDetails{ProblemTypeBase + code, title, a.Status, message, code})
	}
	h := w.Header()
	if o.Documentation != "" {
		h.Set("Link", "<"+o.Documentation+`>; rel="describedby"`)
	}
	writeBody(w, a.Status, contentType, body, a.Headers)
}
