package idempotency

import (
	"encoding/json"
	"net/http"
)

// ProblemTypeBase, ProblemTitles and problemAnswers are generated from
// test/vectors/http_answers.json: spec_gen.go.

// problemAnswer: the status and detail of one of the middleware's answers that is always the same.
type problemAnswer struct {
	status int
	detail string
}

// fixedProblem is the answer of code as the spec gives it, with headers.
func fixedProblem(code string, headers map[string]string) *Answer {
	p := problemAnswers[code]
	return problem(p.status, code, p.detail, headers)
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
