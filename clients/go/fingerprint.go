// The request fingerprint of docs/fingerprint.md, computed client-side: the same 32 bytes as
// SQL idempotency.fingerprint(body::jsonb, exclude) for every JSON text PostgreSQL accepts.
// A JSON text is parsed here, exactly: numbers keep every digit (never through float64).

package idempotency

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of objects and arrays; MaxDigits the most digits a number's
// canonical form may have.
const (
	MaxDepth  = 1000
	MaxDigits = 1000
)

func tooDeep() error {
	return newError(CodeProgramLimitExceeded, fmt.Sprintf("JSON nesting exceeds %d levels", MaxDepth))
}

func tooLong() error {
	return newError(CodeProgramLimitExceeded, fmt.Sprintf("JSON number has more than %d digits", MaxDigits))
}

var numberRE = regexp.MustCompile(`^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([-+]?[0-9]+))?$`)

// CanonicalNumber is the canonical form of a JSON number text (section 3 of
// docs/fingerprint.md).
func CanonicalNumber(text string) (string, error) {
	m := numberRE.FindStringSubmatch(text)
	if m == nil {
		return "", newError(CodeInvalidJSON, fmt.Sprintf("invalid JSON number %q", truncate(text, 40)))
	}
	negative, intDigits, frac, exp := m[1] != "", m[2], m[3], m[4]
	digits := strings.TrimLeft(intDigits+frac, "0")
	if digits == "" {
		return "0", nil
	}
	// A non-zero number whose exponent has 16 or more digits is far beyond MaxDigits digits.
	expDigits := strings.TrimLeft(strings.TrimLeft(exp, "+-"), "0")
	if len(expDigits) > 15 {
		return "", tooLong()
	}
	var e int64
	if exp != "" {
		e, _ = strconv.ParseInt(exp, 10, 64)
	}
	significand := strings.TrimRight(digits, "0")
	n := int64(len(significand))
	x := e - int64(len(frac)) + int64(len(digits)) - n
	point := n + x
	var width int64
	switch {
	case x >= 0:
		width = n + x
	case point > 0:
		width = n
	default:
		width = 1 - x
	}
	if width > MaxDigits {
		return "", tooLong()
	}
	sign := ""
	if negative {
		sign = "-"
	}
	switch {
	case x >= 0:
		return sign + significand + strings.Repeat("0", int(x)), nil
	case point > 0:
		return sign + significand[:point] + "." + significand[point:], nil
	default:
		return sign + "0." + strings.Repeat("0", int(-point)) + significand, nil
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Parsed values: number (canonical text), object (members as written), array, string, and
// the literals.
type jsonNumber string

type jsonObject struct {
	names  []string
	values []interface{}
}

type jsonLiteral string // "true", "false", "null"

type parser struct {
	text  []byte
	pos   int
	limit error // the first limit passed (nesting, digits): raised after the syntax is checked
}

func (p *parser) fail(what string) error {
	near := "the end of the text"
	if p.pos < len(p.text) {
		end := p.pos + 20
		if end > len(p.text) {
			end = len(p.text)
		}
		near = strconv.Quote(string(p.text[p.pos:end]))
	}
	return newError(CodeInvalidJSON, fmt.Sprintf("invalid JSON: %s at byte %d, near %s", what, p.pos+1, near))
}

func (p *parser) skipSpace() {
	for p.pos < len(p.text) {
		switch p.text[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) hex4() (rune, error) {
	if p.pos+4 > len(p.text) {
		return 0, p.fail(`bad \u escape`)
	}
	v, err := strconv.ParseUint(string(p.text[p.pos:p.pos+4]), 16, 32)
	if err != nil || strings.ContainsAny(string(p.text[p.pos:p.pos+4]), "+-") {
		return 0, p.fail(`bad \u escape`)
	}
	p.pos += 4
	return rune(v), nil
}

func nulError() error {
	return newError(CodeUntranslatableCharacter, `unsupported Unicode escape sequence: \u0000 cannot be stored`)
}

func (p *parser) parseString() (string, error) {
	p.pos++ // the opening quote
	var out strings.Builder
	for {
		start := p.pos
		for p.pos < len(p.text) {
			c := p.text[p.pos]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			p.pos++
		}
		out.Write(p.text[start:p.pos])
		if p.pos >= len(p.text) {
			return "", p.fail("unterminated string")
		}
		c := p.text[p.pos]
		if c == '"' {
			p.pos++
			return out.String(), nil
		}
		if c < 0x20 {
			return "", p.fail("control character in a string")
		}
		p.pos++ // a backslash
		if p.pos >= len(p.text) {
			return "", p.fail("unterminated string")
		}
		e := p.text[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/':
			out.WriteByte(e)
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		case 'u':
			u, err := p.hex4()
			if err != nil {
				return "", err
			}
			switch {
			case u == 0:
				return "", nulError()
			case u >= 0xdc00 && u <= 0xdfff:
				return "", p.fail("unpaired low surrogate escape")
			case u >= 0xd800 && u <= 0xdbff:
				if p.pos+1 >= len(p.text) || p.text[p.pos] != '\\' || p.text[p.pos+1] != 'u' {
					return "", p.fail("unpaired high surrogate escape")
				}
				p.pos += 2
				low, err := p.hex4()
				if err != nil {
					return "", err
				}
				if low < 0xdc00 || low > 0xdfff {
					return "", p.fail("unpaired high surrogate escape")
				}
				out.WriteRune(utf16.DecodeRune(u, low))
			default:
				out.WriteRune(u)
			}
		default:
			p.pos -= 2
			return "", p.fail("bad escape")
		}
	}
}

var numberToken = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?`)

func (p *parser) hasPrefix(s string) bool {
	return len(p.text)-p.pos >= len(s) && string(p.text[p.pos:p.pos+len(s)]) == s
}

// parseValue parses the value at pos (white space skipped before it), depth containers deep.
// Beyond MaxDepth the rest of the container is only checked, with an explicit stack (a text
// nested far deeper cannot exhaust the goroutine's stack).
func (p *parser) parseValue(depth int) (interface{}, error) {
	if p.pos >= len(p.text) {
		return nil, p.fail("expected a value")
	}
	c := p.text[p.pos]
	switch {
	case c == '{' || c == '[':
		if depth >= MaxDepth {
			if p.limit == nil {
				p.limit = tooDeep()
			}
			return nil, p.skipContainer()
		}
		p.pos++
		p.skipSpace()
		if c == '[' {
			arr := []interface{}{}
			if p.pos < len(p.text) && p.text[p.pos] == ']' {
				p.pos++
				return arr, nil
			}
			for {
				p.skipSpace()
				v, err := p.parseValue(depth + 1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
				p.skipSpace()
				if p.pos < len(p.text) && p.text[p.pos] == ',' {
					p.pos++
					continue
				}
				if p.pos < len(p.text) && p.text[p.pos] == ']' {
					p.pos++
					return arr, nil
				}
				return nil, p.fail(`expected "," or "]"`)
			}
		}
		obj := &jsonObject{}
		if p.pos < len(p.text) && p.text[p.pos] == '}' {
			p.pos++
			return obj, nil
		}
		for {
			p.skipSpace()
			if p.pos >= len(p.text) || p.text[p.pos] != '"' {
				return nil, p.fail("expected a member name")
			}
			name, err := p.parseString()
			if err != nil {
				return nil, err
			}
			p.skipSpace()
			if p.pos >= len(p.text) || p.text[p.pos] != ':' {
				return nil, p.fail(`expected ":"`)
			}
			p.pos++
			p.skipSpace()
			v, err := p.parseValue(depth + 1)
			if err != nil {
				return nil, err
			}
			obj.names = append(obj.names, name)
			obj.values = append(obj.values, v)
			p.skipSpace()
			if p.pos < len(p.text) && p.text[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.pos < len(p.text) && p.text[p.pos] == '}' {
				p.pos++
				return obj, nil
			}
			return nil, p.fail(`expected "," or "}"`)
		}
	case c == '"':
		return p.parseString()
	case c == '-' || (c >= '0' && c <= '9'):
		m := numberToken.Find(p.text[p.pos:])
		if m == nil {
			return nil, p.fail("invalid number")
		}
		p.pos += len(m)
		n, err := CanonicalNumber(string(m))
		if err != nil {
			if p.limit == nil {
				p.limit = err
			}
			n = "0"
		}
		return jsonNumber(n), nil
	case p.hasPrefix("true"):
		p.pos += 4
		return jsonLiteral("true"), nil
	case p.hasPrefix("false"):
		p.pos += 5
		return jsonLiteral("false"), nil
	case p.hasPrefix("null"):
		p.pos += 4
		return jsonLiteral("null"), nil
	}
	return nil, p.fail("unexpected token")
}

// skipContainer checks the syntax of the object or array at pos and moves past it, keeping
// nothing (it lies beyond MaxDepth, an error once the whole text is checked).
func (p *parser) skipContainer() error {
	var stack []byte // the closing brackets awaited
	for {
		// a value starts at pos
		p.skipSpace()
		if p.pos >= len(p.text) {
			return p.fail("expected a value")
		}
		switch c := p.text[p.pos]; {
		case c == '{' || c == '[':
			p.pos++
			p.skipSpace()
			closing := byte(']')
			if c == '{' {
				closing = '}'
			}
			if p.pos < len(p.text) && p.text[p.pos] == closing {
				p.pos++
				break
			}
			stack = append(stack, closing)
			if c == '{' {
				if err := p.skipName(); err != nil {
					return err
				}
			}
			continue
		default:
			if _, err := p.parseValue(0); err != nil {
				return err
			}
		}
		for {
			p.skipSpace()
			if len(stack) == 0 {
				return nil
			}
			top := stack[len(stack)-1]
			if p.pos < len(p.text) && p.text[p.pos] == ',' {
				p.pos++
				if top == '}' {
					if err := p.skipName(); err != nil {
						return err
					}
				}
				break
			}
			if p.pos >= len(p.text) || p.text[p.pos] != top {
				return p.fail(fmt.Sprintf(`expected "," or "%c"`, top))
			}
			p.pos++
			stack = stack[:len(stack)-1]
		}
	}
}

func (p *parser) skipName() error {
	p.skipSpace()
	if p.pos >= len(p.text) || p.text[p.pos] != '"' {
		return p.fail("expected a member name")
	}
	if _, err := p.parseString(); err != nil {
		return err
	}
	p.skipSpace()
	if p.pos >= len(p.text) || p.text[p.pos] != ':' {
		return p.fail(`expected ":"`)
	}
	p.pos++
	return nil
}

func parseText(text []byte) (interface{}, error) {
	if !utf8.Valid(text) {
		return nil, newError(CodeInvalidJSON, "invalid JSON: the text is not valid UTF-8")
	}
	p := &parser{text: text}
	p.skipSpace()
	v, err := p.parseValue(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.text) {
		return nil, p.fail("text after the value")
	}
	if p.limit != nil {
		return nil, p.limit
	}
	return v, nil
}

func checkExclude(exclude []string) error {
	for _, p := range exclude {
		if p == "" || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
			return newError(CodeInvalidParameterValue, fmt.Sprintf("invalid exclude path %q", p))
		}
	}
	return nil
}

type writer struct {
	paths    map[string]bool
	prefixes map[string]bool
	out      strings.Builder
}

func newWriter(exclude []string) *writer {
	w := &writer{paths: map[string]bool{}, prefixes: map[string]bool{}}
	for _, p := range exclude {
		w.paths[p] = true
		segments := strings.Split(p, ".")
		for i := 1; i < len(segments); i++ {
			w.prefixes[strings.Join(segments[:i], ".")] = true
		}
	}
	return w
}

const hexDigits = "0123456789abcdef"

// quote writes a string as section 4 does: the short escapes, \u00xx for other controls,
// everything else as itself in UTF-8.
func (w *writer) quote(s string) {
	w.out.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		w.out.WriteString(s[start:i])
		start = i + 1
		switch c {
		case '"':
			w.out.WriteString(`\"`)
		case '\\':
			w.out.WriteString(`\\`)
		case '\b':
			w.out.WriteString(`\b`)
		case '\f':
			w.out.WriteString(`\f`)
		case '\n':
			w.out.WriteString(`\n`)
		case '\r':
			w.out.WriteString(`\r`)
		case '\t':
			w.out.WriteString(`\t`)
		default:
			w.out.WriteString(`\u00`)
			w.out.WriteByte(hexDigits[c>>4])
			w.out.WriteByte(hexDigits[c&0xf])
		}
	}
	w.out.WriteString(s[start:])
	w.out.WriteByte('"')
}

// write writes a parsed value; path is the dotted prefix of an object's members ("" at the
// top, "a.b."), or nil where exclusion cannot reach.
func (w *writer) write(v interface{}, path *string) {
	switch v := v.(type) {
	case *jsonObject:
		// Member order by the names' UTF-8 bytes, the written order among equal names: of
		// duplicates, the last wins.
		order := make([]int, len(v.names))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return v.names[order[a]] < v.names[order[b]] })
		w.out.WriteByte('{')
		first := true
		for k, i := range order {
			name := v.names[i]
			if k+1 < len(order) && v.names[order[k+1]] == name {
				continue
			}
			var child *string
			if path != nil && !strings.Contains(name, ".") {
				full := *path + name
				if w.paths[full] {
					continue
				}
				if w.prefixes[full] {
					p := full + "."
					child = &p
				}
			}
			if !first {
				w.out.WriteByte(',')
			}
			first = false
			w.quote(name)
			w.out.WriteByte(':')
			w.write(v.values[i], child)
		}
		w.out.WriteByte('}')
	case []interface{}:
		w.out.WriteByte('[')
		for i, item := range v {
			if i > 0 {
				w.out.WriteByte(',')
			}
			w.write(item, nil)
		}
		w.out.WriteByte(']')
	case jsonNumber:
		w.out.WriteString(string(v))
	case string:
		w.quote(v)
	case jsonLiteral:
		w.out.WriteString(string(v))
	}
}

// CanonicalJSON is the canonical form of a JSON text (UTF-8) as bytes, with the members named
// by exclude (dotted paths) left out. Errors are *Error with the server's SQLSTATE: 22P02 (not
// JSON), 22P05 (\u0000), 54000 (nesting or digits over the limits), 22023 (a bad path).
func CanonicalJSON(text []byte, exclude ...string) ([]byte, error) {
	if err := checkExclude(exclude); err != nil {
		return nil, err
	}
	tree, err := parseText(text)
	if err != nil {
		return nil, err
	}
	w := newWriter(exclude)
	var path *string
	if len(exclude) > 0 {
		empty := ""
		path = &empty
	}
	w.write(tree, path)
	return []byte(w.out.String()), nil
}

// Fingerprint is the SHA-256 of the canonical form of a JSON text: the 32 bytes of SQL
// idempotency.fingerprint(text::jsonb, exclude).
func Fingerprint(text []byte, exclude ...string) ([]byte, error) {
	canonical, err := CanonicalJSON(text, exclude...)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(canonical)
	return sum[:], nil
}

// FingerprintValue fingerprints a Go value as the JSON text encoding/json writes for it
// (maps, slices, structs with their tags, json.Number and json.RawMessage keep their digits;
// a float64 is its shortest round-trip text). A string that is not valid UTF-8, NaN and the
// infinities are errors (22P02), where encoding/json would replace or refuse them.
func FingerprintValue(v interface{}, exclude ...string) ([]byte, error) {
	if err := checkUTF8(v, 0); err != nil {
		return nil, err
	}
	text, err := json.Marshal(v)
	if err != nil {
		return nil, &Error{Code: CodeInvalidJSON, Message: "invalid JSON value: " + err.Error(), Err: err}
	}
	return Fingerprint(text, exclude...)
}

// checkUTF8 refuses the strings encoding/json would silently repair, in the common shapes
// (strings, maps and slices of them); other types are left to encoding/json.
func checkUTF8(v interface{}, depth int) error {
	if depth > MaxDepth {
		return tooDeep()
	}
	bad := func() error { return newError(CodeInvalidJSON, "invalid JSON: a string is not valid UTF-8") }
	switch v := v.(type) {
	case string:
		if !utf8.ValidString(v) {
			return bad()
		}
	case map[string]interface{}:
		for k, item := range v {
			if !utf8.ValidString(k) {
				return bad()
			}
			if err := checkUTF8(item, depth+1); err != nil {
				return err
			}
		}
	case []interface{}:
		for _, item := range v {
			if err := checkUTF8(item, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
