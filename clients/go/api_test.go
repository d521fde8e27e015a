package idempotency_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"
)

// exportedAPI lists the package's exported identifiers, as "kind name" lines: its constants,
// variables, functions and types, the methods of its types ("method T.M") and the fields of
// its structs ("field T.F"), read from the package's source files (tests left out).
func exportedAPI(t *testing.T, dir string) []string {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	must(t, err)
	var api []string
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv == nil {
						api = append(api, "func "+d.Name.Name)
						continue
					}
					recv := d.Recv.List[0].Type
					if star, ok := recv.(*ast.StarExpr); ok {
						recv = star.X
					}
					if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
						api = append(api, "method "+id.Name+"."+d.Name.Name)
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									api = append(api, strings.ToLower(d.Tok.String())+" "+n.Name)
								}
							}
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							api = append(api, "type "+s.Name.Name)
							if st, ok := s.Type.(*ast.StructType); ok {
								for _, field := range st.Fields.List {
									for _, n := range field.Names {
										if n.IsExported() {
											api = append(api, "field "+s.Name.Name+"."+n.Name)
										}
									}
									if len(field.Names) == 0 { // embedded
										typ := field.Type
										if star, ok := typ.(*ast.StarExpr); ok {
											typ = star.X
										}
										if id, ok := typ.(*ast.Ident); ok && id.IsExported() {
											api = append(api, "field "+s.Name.Name+"."+id.Name)
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(api)
	return api
}

// The package's exported API is the one its users were given: moving code between files (or
// adding a file) must not change it. A change here is a change of the public API, on purpose.
func TestExportedAPI(t *testing.T) {
	got := exportedAPI(t, ".")
	var want []string
	for _, line := range strings.Split(publicAPI, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			want = append(want, line)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the exported API changed:\n%s", diffLines(want, got))
	}
}

// diffLines: the lines only in want (-) and only in got (+).
func diffLines(want, got []string) string {
	in := func(list []string) map[string]bool {
		m := map[string]bool{}
		for _, s := range list {
			m[s] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, s := range want {
		if !g[s] {
			b.WriteString("- " + s + "\n")
		}
	}
	for _, s := range got {
		if !w[s] {
			b.WriteString("+ " + s + "\n")
		}
	}
	return b.String()
}

const publicAPI = `
const CodeArraySubscript
const CodeCardinalityViolation
const CodeConnectionLost
const CodeDuplicateObject
const CodeFeatureNotSupported
const CodeInvalidJSON
const CodeInvalidParameterValue
const CodeInvalidTransactionTermination
const CodeKeyInProgress
const CodeKeyTooOld
const CodeLockNotAvailable
const CodeNullValueNotAllowed
const CodeObjectInUse
const CodeObjectNotInPrerequisiteState
const CodeProgramLimitExceeded
const CodeQueryCanceled
const CodeReadOnlySQLTransaction
const CodeResultConflict
const CodeSequenceGeneratorLimit
const CodeSerializationFailure
const CodeStaleAttempt
const CodeStatementSyntaxError
const CodeTransactionAborted
const CodeTransactionOpen
const CodeUndefinedFunction
const CodeUndefinedObject
const CodeUntranslatableCharacter
const EditionExtension
const EditionManaged
const ErrArraySubscript
const ErrCardinalityViolation
const ErrConnectionLost
const ErrDuplicateObject
const ErrFeatureNotSupported
const ErrInvalidJSON
const ErrInvalidParameterValue
const ErrInvalidTransactionTermination
const ErrKeyInProgress
const ErrKeyMismatch
const ErrKeyTooOld
const ErrLockNotAvailable
const ErrNullValueNotAllowed
const ErrObjectInUse
const ErrObjectNotInPrerequisiteState
const ErrProgramLimitExceeded
const ErrQueryCanceled
const ErrReadOnlySQLTransaction
const ErrResultConflict
const ErrScopeMissing
const ErrSequenceGeneratorLimit
const ErrSerializationFailure
const ErrStaleAttempt
const ErrStatementSyntaxError
const ErrTransactionAborted
const ErrTransactionOpen
const ErrUndefinedFunction
const ErrUndefinedObject
const ErrUntranslatableCharacter
const InstalledAsExtension
const InstalledAsScript
const MaxDepth
const MaxDigits
const OutcomeInProgress
const OutcomeMismatch
const OutcomeNew
const OutcomeReplay
const OutcomeTooOld
const ProblemTypeBase
const StoredMark
field Answer.Body
field Answer.Headers
field Answer.Status
field AnswerOptions.Documentation
field AnswerOptions.Legacy
field Attempt.Attempt
field Attempt.RecoveryPoint
field Attempt.Reservation
field Claim.Attempt
field Claim.Key
field Claim.Reservation
field Claim.Scope
field Claim.Tx
field ClaimEvent.Attempt
field ClaimEvent.Duration
field ClaimEvent.Err
field ClaimEvent.Helper
field ClaimEvent.Key
field ClaimEvent.Outcome
field ClaimEvent.RoundTrips
field ClaimEvent.Scope
field ClaimEvent.Status
field ClaimOnceOptions.Retention
field ClaimOnceOptions.Wait
field Client.DB
field Client.ObserveKeys
field Client.Observer
field Edition.Functions
field Edition.InstalledAs
field Edition.Name
field Edition.Version
field Error.Code
field Error.Detail
field Error.Err
field Error.Hint
field Error.Message
field ExecuteOptions.ReserveOptions
field ExecuteOptions.StatusCode
field ExternalOptions.FailWith
field ExternalOptions.Finish
field KeyHeaderError.Code
field KeyHeaderError.Message
field KeyMalformedError.Bytes
field KeyMalformedError.What
field MiddlewareOptions.Answers
field MiddlewareOptions.Exclude
field MiddlewareOptions.KeepHeaders
field MiddlewareOptions.Key
field MiddlewareOptions.Limit
field MiddlewareOptions.Logger
field MiddlewareOptions.ReplayHeaders
field MiddlewareOptions.Request
field MiddlewareOptions.ReserveOptions
field MiddlewareOptions.Scope
field MiddlewareOptions.Statement
field MiddlewareOptions.Store
field OneStatement.Params
field OneStatement.SQL
field OneStatement.StatusCode
field OutcomeError.Key
field OutcomeError.Outcome
field OutcomeError.Reservation
field OutcomeError.Scope
field PositionBelowWatermarkError.Consumer
field PositionBelowWatermarkError.Partition
field PositionBelowWatermarkError.Position
field PositionBelowWatermarkError.Watermark
field Record.Attempt
field Record.CompletedAt
field Record.ExpiresAt
field Record.FirstSeenAt
field Record.LastError
field Record.LockedUntil
field Record.RecoveryPoint
field Record.RequestHash
field Record.Response
field Record.State
field Record.StatusCode
field Replay.Body
field Replay.Headers
field Replay.Value
field Request.Exclude
field Request.Hash
field Request.Key
field Request.Request
field Request.ReserveOptions
field Request.Scope
field Reservation.Attempt
field Reservation.ExpiresAt
field Reservation.FirstSeenAt
field Reservation.LockedUntil
field Reservation.Outcome
field Reservation.RecoveryPoint
field Reservation.Response
field Reservation.StatusCode
field ReserveOptions.LockTTL
field ReserveOptions.Retention
field ReserveOptions.Wait
field Result.Attempt
field Result.Replayed
field Result.Response
field Result.StatusCode
field Statement.Args
field Statement.SQL
field StatementOptions.Params
field StatementOptions.SQL
field StatementOptions.Status
field StatementResult.Rows
field StatementResult.Tag
func Accept
func AnswerFor
func CanonicalJSON
func CanonicalNumber
func CheckNames
func Checkpoint
func ClaimFrom
func ClaimOnce
func Complete
func DetectEdition
func ExecuteOnce
func Fail
func Fingerprint
func FingerprintValue
func Forget
func IsConnectionLost
func Lookup
func New
func NextKey
func ParseIdempotencyKey
func PositionInt
func PositionUUID
func RegisterPipeliner
func ReplayOf
func Reserve
func ReserveBegin
func RunOnceStatementTx
func RunOnceTx
func StatementParams
func StoredAnswer
func TxFrom
func Watermark
func WithPipeliner
func WriteAnswer
method Answer.Write
method Attempt.Checkpoint
method ClaimObserverFunc.ObserveClaim
method Client.ApplyOnce
method Client.ConsumeOnce
method Client.Edition
method Client.Middleware
method Client.RefreshEdition
method Client.RunExternal
method Client.RunOnce
method Client.RunOnceStatement
method Code.Error
method Edition.Offers
method Error.Error
method Error.HTTPStatus
method Error.Is
method Error.Unwrap
method HeaderSentinel.Error
method HeaderSentinel.HTTPStatus
method KeyHeaderError.Error
method KeyHeaderError.HTTPStatus
method KeyHeaderError.Is
method KeyMalformedError.Error
method KeyMalformedError.HTTPError
method KeyMalformedError.HTTPStatus
method KeyMalformedError.Is
method OutcomeError.Error
method OutcomeError.HTTPStatus
method OutcomeError.Is
method OutcomeError.RetryAfter
method Position.String
method PositionBelowWatermarkError.Error
type Answer
type AnswerOptions
type Attempt
type Claim
type ClaimEvent
type ClaimObserver
type ClaimObserverFunc
type ClaimOnceOptions
type Client
type Code
type Edition
type Error
type ExecuteOptions
type ExternalOptions
type Features
type HeaderSentinel
type KeyHeaderError
type KeyMalformedError
type Logger
type MiddlewareOptions
type OneStatement
type Option
type Outcome
type OutcomeError
type Pipeliner
type Position
type PositionBelowWatermarkError
type Querier
type Record
type Replay
type Request
type Reservation
type ReserveOptions
type Result
type Statement
type StatementOptions
type StatementResult
type Work
var ProblemTitles
`

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
