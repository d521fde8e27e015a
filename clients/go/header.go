package idempotency

import (
	"regexp"
	"strings"
)

var (
	uuidHeaderRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	tokenRE      = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`) // visible ASCII, no spaces
)

var (
	errKeyMissing   = &KeyHeaderError{"idempotency_key_missing", problemAnswers["idempotency_key_missing"].detail}
	errKeyMalformed = &KeyHeaderError{"idempotency_key_malformed", problemAnswers["idempotency_key_malformed"].detail}
)

// ParseIdempotencyKey is the key of an Idempotency-Key header: the IETF draft's sf-string
// (RFC 8941: "..." with \" and \\ the only escapes; a parameter, a list or anything else after
// the closing quote is refused) or the unquoted token Stripe-style clients send, the two
// spellings of one key being the same key. The key is a UUID (lower-cased) or 1 to 255
// visible ASCII characters (test/vectors/idempotency_key.json).
func ParseIdempotencyKey(raw string) (string, error) {
	if raw == "" {
		return "", errKeyMissing
	}
	key := strings.Trim(raw, " \t")
	if strings.HasPrefix(key, `"`) {
		var ok bool
		if key, ok = parseSfString(key); !ok {
			return "", errKeyMalformed
		}
	}
	if uuidHeaderRE.MatchString(key) {
		return strings.ToLower(key), nil
	}
	if !tokenRE.MatchString(key) {
		return "", errKeyMalformed
	}
	return key, nil
}

// parseSfString is the value of an RFC 8941 sf-string that is all of text, or false.
func parseSfString(text string) (string, bool) {
	var b strings.Builder
	for i := 1; i < len(text); i++ {
		switch c := text[i]; {
		case c == '\\':
			i++
			if i == len(text) || (text[i] != '"' && text[i] != '\\') {
				return "", false
			}
			b.WriteByte(text[i])
		case c == '"':
			return b.String(), i == len(text)-1
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false // not closed
}
