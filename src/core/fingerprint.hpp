// Request fingerprints: SHA-256 over a canonical JSON form.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace idem::core {

using Sha256 = std::array<std::uint8_t, 32>;

// Deepest object/array nesting accepted by canonical_json (deeper throws LimitExceeded).
constexpr int kMaxJsonDepth = 1000;

// Most digits a number may have in its normal form ("0.00012" has 6; "1e999" has 1000);
// more throws LimitExceeded.
constexpr int kMaxNumberDigits = 1000;

// SHA-256 (OpenSSL EVP) of the bytes as given.
Sha256 sha256(std::string_view bytes);

// Parses RFC 8259 JSON text and returns its canonical form: no insignificant white space,
// object members sorted by key (bytewise), duplicate keys resolved as jsonb does (the last
// wins), numbers in a plain normal form equal for numerically equal values ("1.50" and "1.5"
// and "15e-1" give "1.5"; "1e2" gives "100"; "-0" gives "0"), strings in UTF-8 with only '"',
// '\\' and control characters escaped (\b \f \n \r \t, else \u00xx). Members named by
// `exclude` are dropped: each entry is a top-level key or a dotted path ("meta.sent_at")
// through nested objects; a path that does not lead to a member drops nothing. Keys containing
// '.' cannot be named.
// Throws Error(InvalidText) on malformed JSON (including invalid UTF-8 and unpaired surrogate
// escapes), Error(LimitExceeded) past kMaxJsonDepth or kMaxNumberDigits, and
// Error(InvalidParameter) for an empty exclude entry or one with an empty path segment.
std::string canonical_json(std::string_view json, const std::vector<std::string> &exclude = {});

// sha256(canonical_json(json, exclude)).
Sha256 fingerprint_json(std::string_view json, const std::vector<std::string> &exclude = {});

}  // namespace idem::core
