// Canonical JSON and fingerprints. The parser and the writer are iterative (explicit stacks),
// so hostile nesting cannot overflow the C++ stack.
#include "core/fingerprint.hpp"
#include "core/hex.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <stdexcept>
#include <unordered_set>

#include <openssl/evp.h>

#include "core/error.hpp"
#include "core/no_postgres.hpp"

namespace idem::core {
namespace {

constexpr std::size_t kNpos = std::string_view::npos;
constexpr std::int64_t kExponentCap = 1'000'000'000'000'000;  // saturate larger exponents
constexpr std::size_t kFlushBytes = 16 * 1024;                // digest buffer size

enum class Type : std::uint8_t { Null, False, True, Number, String, Array, Object };

// One JSON value, in document order. An object's children are pairs of a String node (the
// key) and the value's nodes; a container's `len` is the index just past its last descendant.
struct Node {
    std::uint32_t off;  // String/Number: start in the input, or in the arena if in_arena
    std::uint32_t len;  // String/Number: byte length; Array/Object: end index
    Type type;
    bool in_arena;  // a string with escapes, stored decoded
    bool dropped;   // a key named by `exclude`
};

struct Doc {
    std::string_view input;
    std::string arena;
    std::vector<Node> tape;

    std::string_view text(std::uint32_t i) const {
        const Node &n = tape[i];
        const std::string_view base = n.in_arena ? std::string_view(arena) : input;
        return base.substr(n.off, n.len);
    }
    // Index of the node following value i and its descendants.
    std::uint32_t skip(std::uint32_t i) const {
        const Node &n = tape[i];
        return n.type == Type::Array || n.type == Type::Object ? n.len : i + 1;
    }
};

// ---- numbers ----

// An RFC 8259 number: value = ±(int_digits.frac_digits) * 10^exponent.
struct Decimal {
    bool negative = false;
    std::string_view int_digits, frac_digits;
    std::int64_t exponent = 0;  // saturated at ±kExponentCap

    std::size_t size() const { return int_digits.size() + frac_digits.size(); }
    char digit(std::size_t i) const {
        return i < int_digits.size() ? int_digits[i] : frac_digits[i - int_digits.size()];
    }
};

bool is_digit(std::string_view s, std::size_t p) {
    return p < s.size() && s[p] >= '0' && s[p] <= '9';
}

std::size_t skip_digits(std::string_view s, std::size_t p) {
    while (is_digit(s, p)) ++p;
    return p;
}

// Reads a number at pos (advancing it); false if the text there is not a valid number.
bool read_number(std::string_view s, std::size_t &pos, Decimal &d) {
    std::size_t p = pos;
    d.negative = p < s.size() && s[p] == '-';
    if (d.negative) ++p;
    const std::size_t int_start = p;
    if (p < s.size() && s[p] == '0') {
        ++p;
    } else {
        if (!is_digit(s, p)) return false;
        p = skip_digits(s, p);
    }
    d.int_digits = s.substr(int_start, p - int_start);
    d.frac_digits = {};
    if (p < s.size() && s[p] == '.') {
        const std::size_t frac_start = ++p;
        p = skip_digits(s, p);
        if (p == frac_start) return false;
        d.frac_digits = s.substr(frac_start, p - frac_start);
    }
    d.exponent = 0;
    if (p < s.size() && (s[p] == 'e' || s[p] == 'E')) {
        ++p;
        const bool negative_exponent = p < s.size() && s[p] == '-';
        if (p < s.size() && (s[p] == '-' || s[p] == '+')) ++p;
        if (!is_digit(s, p)) return false;
        for (; is_digit(s, p); ++p) {
            if (d.exponent < kExponentCap) d.exponent = d.exponent * 10 + (s[p] - '0');
        }
        if (negative_exponent) d.exponent = -d.exponent;
    }
    pos = p;
    return true;
}

// The significant digits [lo, hi) of a Decimal and the power of ten of digit hi-1; lo == hi
// for zero.
struct Significand {
    std::size_t lo, hi;
    std::int64_t exp10;
};

Significand significand(const Decimal &d) {
    const std::size_t n = d.size();
    std::size_t lo = 0;
    while (lo < n && d.digit(lo) == '0') ++lo;
    std::size_t hi = n;
    while (hi > lo && d.digit(hi - 1) == '0') --hi;
    const auto exp10 = d.exponent - static_cast<std::int64_t>(d.frac_digits.size()) +
                       static_cast<std::int64_t>(n - hi);
    return {lo, hi, exp10};
}

// Digits written by write_number (sign and point not counted).
std::int64_t plain_digits(const Significand &s) {
    const auto n = static_cast<std::int64_t>(s.hi - s.lo);
    if (n == 0) return 1;
    if (s.exp10 >= 0) return n + s.exp10;
    const std::int64_t point = n + s.exp10;  // digits before the decimal point
    return point > 0 ? n : n - point + 1;
}

// ---- output ----

// SHA-256 through OpenSSL's EVP interface. The algorithm is fetched once and the context
// reused per thread: OpenSSL 3 would otherwise look the provider up on every digest, which
// cost more than hashing a small request body. So one digest per thread at a time: each is
// finished before the next one starts.
class Sha256Digest {
  public:
    Sha256Digest() {
        static EVP_MD *const algorithm = EVP_MD_fetch(nullptr, "SHA256", nullptr);
        thread_local const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(
            EVP_MD_CTX_new(), &EVP_MD_CTX_free);
        ctx_ = context.get();
        if (algorithm == nullptr || ctx_ == nullptr ||
            EVP_DigestInit_ex2(ctx_, algorithm, nullptr) != 1) {
            throw std::runtime_error("SHA-256 init failed");
        }
    }
    void update(std::string_view bytes) {
        if (EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()) != 1) {
            throw std::runtime_error("SHA-256 update failed");
        }
    }
    Sha256 finish() {
        Sha256 hash{};
        unsigned int size = 0;
        if (EVP_DigestFinal_ex(ctx_, hash.data(), &size) != 1 || size != hash.size()) {
            throw std::runtime_error("SHA-256 final failed");
        }
        return hash;
    }

  private:
    EVP_MD_CTX *ctx_;
};

// Collects the canonical text, or feeds it to a SHA-256 digest in chunks.
class Out {
  public:
    explicit Out(Sha256Digest *digest = nullptr) : digest_(digest) {}

    void put(char c) { buf_.push_back(c); }
    void put(std::string_view s) { buf_.append(s.data(), s.size()); }
    void put_zeros(std::int64_t n) { buf_.append(static_cast<std::size_t>(n), '0'); }
    void maybe_flush() {
        if (digest_ != nullptr && buf_.size() >= kFlushBytes) flush();
    }
    void flush() {
        digest_->update(buf_);
        buf_.clear();
    }
    std::string &text() { return buf_; }

  private:
    Sha256Digest *digest_;
    std::string buf_;
};

void put_digits(const Decimal &d, std::size_t from, std::size_t to, Out &out) {
    for (std::size_t i = from; i < to; ++i) out.put(d.digit(i));
}

// Writes a valid number (already checked by the parser) in plain normal form.
void write_number(std::string_view text, Out &out) {
    Decimal d;
    std::size_t pos = 0;
    read_number(text, pos, d);
    const Significand s = significand(d);
    if (s.lo == s.hi) return out.put('0');
    if (d.negative) out.put('-');
    const std::int64_t point = static_cast<std::int64_t>(s.hi - s.lo) + s.exp10;
    if (s.exp10 >= 0) {
        put_digits(d, s.lo, s.hi, out);
        out.put_zeros(s.exp10);
    } else if (point > 0) {
        put_digits(d, s.lo, s.lo + static_cast<std::size_t>(point), out);
        out.put('.');
        put_digits(d, s.lo + static_cast<std::size_t>(point), s.hi, out);
    } else {
        out.put("0.");
        out.put_zeros(-point);
        put_digits(d, s.lo, s.hi, out);
    }
}

void put_escape(unsigned char c, Out &out) {
    static constexpr char kHex[] = "0123456789abcdef";
    switch (c) {
        case '"':
            return out.put("\\\"");
        case '\\':
            return out.put("\\\\");
        case '\b':
            return out.put("\\b");
        case '\f':
            return out.put("\\f");
        case '\n':
            return out.put("\\n");
        case '\r':
            return out.put("\\r");
        case '\t':
            return out.put("\\t");
        default:
            out.put("\\u00");
            out.put(kHex[c >> 4]);
            out.put(kHex[c & 0xf]);
    }
}

void write_string(std::string_view s, Out &out) {
    out.put('"');
    std::size_t run = 0;  // start of the bytes not yet written
    for (std::size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        out.put(s.substr(run, i - run));
        put_escape(c, out);
        run = i + 1;
    }
    out.put(s.substr(run));
    out.put('"');
}

// ---- parser ----

// Length of the well-formed UTF-8 sequence at the start of s (s[0] >= 0x80), or 0.
std::size_t utf8_length(std::string_view s) {
    const auto byte = [s](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned c = byte(0);
    unsigned lo = 0x80, hi = 0xbf;  // range of the second byte
    std::size_t n;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0) lo = 0xa0;  // overlong
        if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0) lo = 0x90;  // overlong
        if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
        return 0;
    }
    if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
    for (std::size_t i = 2; i < n; ++i) {
        if ((byte(i) & 0xc0) != 0x80) return 0;
    }
    return n;
}

void put_utf8(std::uint32_t cp, std::string &out) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
        out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
}

class Parser {
  public:
    explicit Parser(Doc &doc) : doc_(doc), in_(doc.input) {}

    void parse() {
        while (value() || next()) {
        }
        skip_ws();
        if (pos_ != in_.size()) fail(pos_, "unexpected data after the value");
    }

  private:
    [[noreturn]] static void fail(std::size_t at, const char *what) {
        throw Error(ErrorKind::InvalidText,
                    "invalid JSON at byte " + std::to_string(at) + ": " + what);
    }

    void skip_ws() {
        while (pos_ < in_.size() &&
               (in_[pos_] == ' ' || in_[pos_] == '\n' || in_[pos_] == '\r' || in_[pos_] == '\t')) {
            ++pos_;
        }
    }

    void add(std::size_t off, std::size_t len, Type type, bool in_arena = false) {
        doc_.tape.push_back({static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(len), type,
                             in_arena, false});
    }

    // Reads one value; true if it opened a container whose first value comes next.
    bool value() {
        skip_ws();
        if (pos_ >= in_.size()) fail(pos_, "unexpected end of input");
        switch (in_[pos_]) {
            case '{':
                return open(Type::Object, '}');
            case '[':
                return open(Type::Array, ']');
            case '"':
                string();
                return false;
            case 't':
                literal("true", Type::True);
                return false;
            case 'f':
                literal("false", Type::False);
                return false;
            case 'n':
                literal("null", Type::Null);
                return false;
            default:
                number();
                return false;
        }
    }

    // After a complete value: closes finished containers; true if another value follows.
    bool next() {
        while (!open_.empty()) {
            skip_ws();
            if (pos_ >= in_.size()) fail(pos_, "unexpected end of input");
            const bool object = doc_.tape[open_.back()].type == Type::Object;
            const char c = in_[pos_++];
            if (c == ',') {
                if (object) member_key();
                return true;
            }
            if (c != (object ? '}' : ']'))
                fail(pos_ - 1, object ? "expected ',' or '}'" : "expected ',' or ']'");
            close();
        }
        return false;
    }

    bool open(Type type, char closing) {
        if (open_.size() >= static_cast<std::size_t>(kMaxJsonDepth)) {
            throw Error(ErrorKind::LimitExceeded,
                        "JSON nesting exceeds " + std::to_string(kMaxJsonDepth) + " levels");
        }
        open_.push_back(static_cast<std::uint32_t>(doc_.tape.size()));
        add(0, 0, type);
        ++pos_;
        skip_ws();
        if (pos_ < in_.size() && in_[pos_] == closing) {
            ++pos_;
            close();
            return false;
        }
        if (type == Type::Object) member_key();
        return true;
    }

    void close() {
        doc_.tape[open_.back()].len = static_cast<std::uint32_t>(doc_.tape.size());
        open_.pop_back();
    }

    void member_key() {
        skip_ws();
        if (pos_ >= in_.size() || in_[pos_] != '"') fail(pos_, "expected a string key");
        string();
        skip_ws();
        if (pos_ >= in_.size() || in_[pos_] != ':') fail(pos_, "expected ':'");
        ++pos_;
    }

    void literal(std::string_view word, Type type) {
        if (in_.substr(pos_, word.size()) != word) fail(pos_, "unexpected character");
        add(pos_, word.size(), type);
        pos_ += word.size();
    }

    void number() {
        const std::size_t start = pos_;
        Decimal d;
        if (!read_number(in_, pos_, d)) {
            const char c = in_[start];
            fail(start,
                 c == '-' || (c >= '0' && c <= '9') ? "invalid number" : "unexpected character");
        }
        if (plain_digits(significand(d)) > kMaxNumberDigits) {
            throw Error(ErrorKind::LimitExceeded, "JSON number at byte " + std::to_string(start) +
                                                      " has more than " +
                                                      std::to_string(kMaxNumberDigits) + " digits");
        }
        add(start, pos_ - start, Type::Number);
    }

    // A string at the opening quote. Without escapes it stays a slice of the input; with
    // escapes it is decoded into the arena.
    void string() {
        const std::size_t start = ++pos_;
        std::size_t run = start;  // bytes from here on are not yet copied to the arena
        std::size_t arena_start = kNpos;
        for (;;) {
            if (pos_ >= in_.size()) fail(start - 1, "unterminated string");
            const auto c = static_cast<unsigned char>(in_[pos_]);
            if (c == '"') break;
            if (c == '\\') {
                if (arena_start == kNpos) arena_start = doc_.arena.size();
                doc_.arena.append(in_.data() + run, pos_ - run);
                unescape();
                run = pos_;
            } else if (c < 0x20) {
                fail(pos_, "control character in string");
            } else if (c < 0x80) {
                ++pos_;
            } else {
                const std::size_t n = utf8_length(in_.substr(pos_));
                if (n == 0) {
                    throw Error(ErrorKind::InvalidText,
                                "invalid UTF-8 in JSON at byte " + std::to_string(pos_));
                }
                pos_ += n;
            }
        }
        if (arena_start == kNpos) {
            add(start, pos_ - start, Type::String);
        } else {
            doc_.arena.append(in_.data() + run, pos_ - run);
            add(arena_start, doc_.arena.size() - arena_start, Type::String, true);
        }
        ++pos_;
    }

    // An escape at the backslash; appends the decoded character to the arena.
    void unescape() {
        const std::size_t at = pos_;
        if (pos_ + 1 >= in_.size()) fail(at, "unterminated string");
        const char e = in_[pos_ + 1];
        pos_ += 2;
        std::string &a = doc_.arena;
        switch (e) {
            case '"':
            case '\\':
            case '/':
                return a.push_back(e);
            case 'b':
                return a.push_back('\b');
            case 'f':
                return a.push_back('\f');
            case 'n':
                return a.push_back('\n');
            case 'r':
                return a.push_back('\r');
            case 't':
                return a.push_back('\t');
            case 'u':
                return put_utf8(code_point(at), a);
            default:
                fail(at, "invalid escape");
        }
    }

    // The code point of a \u escape (pos_ just after "\u"), joining a surrogate pair.
    std::uint32_t code_point(std::size_t at) {
        const std::uint32_t cp = hex4(at);
        if (cp >= 0xdc00 && cp <= 0xdfff) fail(at, "unpaired Unicode low surrogate");
        if (cp < 0xd800 || cp > 0xdbff) return cp;
        if (in_.substr(pos_, 2) != "\\u") fail(at, "unpaired Unicode high surrogate");
        pos_ += 2;
        const std::uint32_t low = hex4(at);
        if (low < 0xdc00 || low > 0xdfff) fail(at, "unpaired Unicode high surrogate");
        return 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
    }

    std::uint32_t hex4(std::size_t at) {
        if (in_.size() - pos_ < 4) fail(at, "invalid \\u escape");
        std::uint32_t cp = 0;
        for (int i = 0; i < 4; ++i) {
            const int v = hex_value(in_[pos_++]);
            if (v < 0) fail(at, "invalid \\u escape");
            cp = cp << 4 | static_cast<std::uint32_t>(v);
        }
        return cp;
    }

    Doc &doc_;
    std::string_view in_;
    std::size_t pos_ = 0;
    std::vector<std::uint32_t> open_;  // containers not yet closed
};

// ---- exclusion ----

void check_exclude_path(std::string_view path) {
    if (path.empty() || path.front() == '.' || path.back() == '.' || path.find("..") != kNpos) {
        throw Error(ErrorKind::InvalidParameter,
                    "invalid exclude path \"" + std::string(path) + "\"");
    }
}

// Marks the members named by `exclude` as dropped. The paths go in hash sets (whole paths,
// and the prefixes that lead through nested objects), so a single pass over the objects they
// lead through does it: linear in the document plus the paths, however long the list.
// Keys containing '.' cannot be named. Of repeated keys only the last is written, so marking
// the others too changes nothing.
void drop_paths(Doc &doc, const std::vector<std::string> &exclude) {
    if (exclude.empty() || doc.tape[0].type != Type::Object) return;
    std::unordered_set<std::string_view> paths, prefixes;
    for (const std::string &path : exclude) {
        paths.insert(path);
        for (std::size_t dot = path.find('.'); dot != kNpos; dot = path.find('.', dot + 1)) {
            prefixes.insert(std::string_view(path).substr(0, dot));
        }
    }
    struct Visit {
        std::uint32_t obj;
        std::string prefix;  // "" for the top level, else "a.b."
    };
    std::vector<Visit> todo{{0, {}}};
    std::string name;
    while (!todo.empty()) {
        const Visit visit = std::move(todo.back());
        todo.pop_back();
        for (std::uint32_t k = visit.obj + 1; k < doc.tape[visit.obj].len; k = doc.skip(k + 1)) {
            const std::string_view key = doc.text(k);
            if (key.find('.') != kNpos) continue;
            name.assign(visit.prefix).append(key);
            if (paths.count(name) != 0) doc.tape[k].dropped = true;
            if (doc.tape[k + 1].type == Type::Object && prefixes.count(name) != 0) {
                todo.push_back({k + 1, name + '.'});
            }
        }
    }
}

// ---- writer ----

class Writer {
  public:
    Writer(const Doc &doc, Out &out) : doc_(doc), out_(out) {}

    void write() {
        value(0);
        while (!frames_.empty()) {
            Frame &f = frames_.back();
            if (f.next == f.end) {
                out_.put(f.object ? '}' : ']');
                if (f.object) members_.resize(f.begin);
                frames_.pop_back();
                continue;
            }
            if (f.next != f.begin) out_.put(',');
            std::uint32_t child = f.next;
            if (f.object) {
                const std::uint32_t key = members_[f.next++];
                write_string(doc_.text(key), out_);
                out_.put(':');
                child = key + 1;
            } else {
                f.next = doc_.skip(child);
            }
            value(child);  // may push a frame: f is dangling from here on
            out_.maybe_flush();
        }
    }

  private:
    // An open container: array children [next, end) in the tape, or object members
    // [next, end) in members_ (starting at begin).
    struct Frame {
        std::uint32_t begin, next, end;
        bool object;
    };

    void value(std::uint32_t i) {
        const Node &n = doc_.tape[i];
        switch (n.type) {
            case Type::Null:
                return out_.put("null");
            case Type::False:
                return out_.put("false");
            case Type::True:
                return out_.put("true");
            case Type::Number:
                return write_number(doc_.text(i), out_);
            case Type::String:
                return write_string(doc_.text(i), out_);
            case Type::Array:
                out_.put('[');
                frames_.push_back({i + 1, i + 1, n.len, false});
                return;
            case Type::Object:
                out_.put('{');
                push_object(i);
                return;
        }
    }

    // Queues the members of obj sorted by key, keeping the last of duplicates, minus dropped.
    void push_object(std::uint32_t obj) {
        const auto begin = static_cast<std::uint32_t>(members_.size());
        for (std::uint32_t k = obj + 1; k < doc_.tape[obj].len; k = doc_.skip(k + 1)) {
            members_.push_back(k);
        }
        std::sort(members_.begin() + begin, members_.end(), [this](auto a, auto b) {
            const int c = doc_.text(a).compare(doc_.text(b));
            return c < 0 || (c == 0 && a < b);
        });
        std::uint32_t kept = begin;
        for (std::size_t r = begin; r < members_.size(); ++r) {
            const std::uint32_t k = members_[r];
            const bool repeated =
                r + 1 < members_.size() && doc_.text(members_[r + 1]) == doc_.text(k);
            if (!repeated && !doc_.tape[k].dropped) members_[kept++] = k;
        }
        members_.resize(kept);
        frames_.push_back({begin, begin, kept, true});
    }

    const Doc &doc_;
    Out &out_;
    std::vector<Frame> frames_;
    std::vector<std::uint32_t> members_;  // key nodes of the open objects, innermost last
};

void canonicalize(std::string_view json, const std::vector<std::string> &exclude, Out &out) {
    if (json.size() >= std::numeric_limits<std::uint32_t>::max()) {
        throw Error(ErrorKind::LimitExceeded, "JSON text is too long");
    }
    for (const std::string &path : exclude) check_exclude_path(path);
    Doc doc{json, {}, {}};
    doc.tape.reserve(json.size() / 4 + 16);
    Parser(doc).parse();
    drop_paths(doc, exclude);
    Writer(doc, out).write();
}

}  // namespace

Sha256 sha256(std::string_view bytes) {
    Sha256Digest digest;
    digest.update(bytes);
    return digest.finish();
}

std::string canonical_json(std::string_view json, const std::vector<std::string> &exclude) {
    Out out;
    out.text().reserve(json.size());
    canonicalize(json, exclude, out);
    return std::move(out.text());
}

Sha256 fingerprint_json(std::string_view json, const std::vector<std::string> &exclude) {
    Sha256Digest digest;
    Out out(&digest);
    out.text().reserve(std::min(json.size(), kFlushBytes) + 1024);
    canonicalize(json, exclude, out);
    out.flush();
    return digest.finish();
}

}  // namespace idem::core
