package idempotency_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	idempotency "github.com/pgidempotency/idempotency/clients/go"
)

// errors.Is matches on the SQLSTATE (or the outcome) alone: whatever the error's message,
// however it is wrapped; the sentinels are constants, so no program can change what they
// match.
func TestSentinelsMatchOnTheCode(t *testing.T) {
	stale := fmt.Errorf("saving: %w", &idempotency.Error{Code: idempotency.CodeStaleAttempt,
		Message: "another holder took the key over"})
	cases := []struct {
		err    error
		target error
		want   bool
	}{
		{stale, idempotency.ErrStaleAttempt, true},
		{stale, idempotency.ErrResultConflict, false},
		{&idempotency.Error{Code: idempotency.CodeUntranslatableCharacter}, idempotency.ErrInvalidJSON, true},
		{&idempotency.Error{Code: idempotency.CodeKeyInProgress, Message: "IK003"}, idempotency.ErrKeyInProgress, true},
		{&idempotency.Error{Code: idempotency.CodeKeyTooOld}, idempotency.ErrKeyTooOld, true},
		{&idempotency.OutcomeError{Outcome: idempotency.OutcomeMismatch, Key: "k"}, idempotency.ErrKeyMismatch, true},
		{&idempotency.OutcomeError{Outcome: idempotency.OutcomeMismatch, Key: "k"}, idempotency.ErrKeyTooOld, false},
		{&idempotency.KeyMalformedError{What: "key", Bytes: 300}, idempotency.ErrProgramLimitExceeded, true},
		{&idempotency.KeyMalformedError{What: "key"}, idempotency.ErrInvalidParameterValue, true},
	}
	for i, c := range cases {
		if got := errors.Is(c.err, c.target); got != c.want {
			t.Errorf("case %d: errors.Is(%v, %v) = %v", i, c.err, c.target, got)
		}
	}
	if idempotency.ErrStaleAttempt != idempotency.Code(idempotency.CodeStaleAttempt) {
		t.Fatal("the sentinel is not its code")
	}
	var outcome idempotency.Outcome = idempotency.OutcomeReplay
	if outcome != "replay" {
		t.Fatalf("outcome %q", outcome)
	}
}

// ErrScopeMissing is a constant matched on its code: a Scope function's own error of that code,
// however wrapped, is it; another code is not.
func TestScopeMissingMatchesOnTheCode(t *testing.T) {
	own := &idempotency.KeyHeaderError{Code: "idempotency_scope_missing", Message: "no X-Account header"}
	cases := []struct {
		err  error
		want bool
	}{
		{idempotency.ErrScopeMissing, true},
		{fmt.Errorf("no account: %w", idempotency.ErrScopeMissing), true},
		{fmt.Errorf("no account: %w", own), true},
		{&idempotency.KeyHeaderError{Code: "idempotency_key_missing", Message: "x"}, false},
		{errors.New("idempotency: the request does not say whose it is"), false},
	}
	for i, c := range cases {
		if got := errors.Is(c.err, idempotency.ErrScopeMissing); got != c.want {
			t.Errorf("case %d (%v): errors.Is = %v, want %v", i, c.err, got, c.want)
		}
	}
	a := idempotency.AnswerFor(fmt.Errorf("wrapped: %w", idempotency.ErrScopeMissing), time.Now())
	if a == nil || a.Status != 400 || a.Body["error"] != "idempotency_scope_missing" {
		t.Fatalf("the answer to a wrapped ErrScopeMissing: %+v", a)
	}
}
