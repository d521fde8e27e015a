// Strict JSON checking of outbox message content, without allocation (see outbox_content.hpp).
#include "core/outbox_content.hpp"

#include <cstdint>

#include "core/no_postgres.hpp"

namespace idem::core {
namespace {

class Scanner {
  public:
    explicit Scanner(std::string_view text)
        : p_(reinterpret_cast<const unsigned char *>(text.data())), end_(p_ + text.size()) {}

    bool at_end() const { return p_ == end_; }
    std::size_t offset(std::string_view text) const {
        return std::size_t(p_ - reinterpret_cast<const unsigned char *>(text.data()));
    }

    void skip_space() {
        while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
    }

    bool take(unsigned char c) {
        if (p_ < end_ && *p_ == c) {
            ++p_;
            return true;
        }
        return false;
    }

    int peek() const { return p_ < end_ ? *p_ : -1; }

    // A string, at its opening quote.
    bool string() {
        if (!take('"')) return false;
        while (p_ < end_) {
            unsigned char c = *p_++;
            if (c == '"') return true;
            if (c < 0x20) return false;
            if (c != '\\') continue;
            if (p_ == end_) return false;
            switch (*p_++) {
                case '"':
                case '\\':
                case '/':
                case 'b':
                case 'f':
                case 'n':
                case 'r':
                case 't':
                    break;
                case 'u':
                    for (int i = 0; i < 4; ++i)
                        if (p_ == end_ || !is_hex(*p_++)) return false;
                    break;
                default:
                    return false;
            }
        }
        return false;
    }

    // -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
    bool number() {
        take('-');
        if (take('0')) {
        } else if (p_ < end_ && *p_ >= '1' && *p_ <= '9') {
            digits();
        } else {
            return false;
        }
        if (take('.') && !digits()) return false;
        if (take('e') || take('E')) {
            if (!take('+')) take('-');
            if (!digits()) return false;
        }
        return true;
    }

    bool literal(std::string_view word) {
        if (std::size_t(end_ - p_) < word.size()) return false;
        for (char c : word)
            if (*p_++ != static_cast<unsigned char>(c)) return false;
        return true;
    }

  private:
    static bool is_hex(unsigned char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    }

    bool digits() {
        const unsigned char *start = p_;
        while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
        return p_ != start;
    }

    const unsigned char *p_;
    const unsigned char *end_;
};

// Which containers are open: one bit per level (1 = object), in the caller's words.
class Nesting {
  public:
    explicit Nesting(NestingBits bits) : bits_(bits.words), capacity_(bits.count * 64) {}
    bool push(bool object) {
        if (depth_ == capacity_) return false;
        std::uint64_t bit = std::uint64_t{1} << (depth_ % 64);
        if (object)
            bits_[depth_ / 64] |= bit;
        else
            bits_[depth_ / 64] &= ~bit;
        ++depth_;
        return true;
    }
    void pop() { --depth_; }
    std::size_t depth() const { return depth_; }
    bool in_object() const {
        std::size_t top = depth_ - 1;
        return (bits_[top / 64] >> (top % 64)) & 1;
    }

  private:
    std::uint64_t *bits_;
    std::size_t capacity_;
    std::size_t depth_ = 0;
};

JsonCheck check_value(Scanner &s, NestingBits bits) {
    Nesting nesting(bits);
    for (;;) {
        // A value is expected.
        s.skip_space();
        bool ok;
        switch (s.peek()) {
            case '{':
                s.take('{');
                if (!nesting.push(true)) return JsonCheck::TooDeep;
                s.skip_space();
                if (s.take('}')) {
                    nesting.pop();
                    ok = true;
                    break;
                }
                if (!s.string()) return JsonCheck::Invalid;
                s.skip_space();
                if (!s.take(':')) return JsonCheck::Invalid;
                continue;
            case '[':
                s.take('[');
                if (!nesting.push(false)) return JsonCheck::TooDeep;
                s.skip_space();
                if (s.take(']')) {
                    nesting.pop();
                    ok = true;
                    break;
                }
                continue;
            case '"':
                ok = s.string();
                break;
            case 't':
                ok = s.literal("true");
                break;
            case 'f':
                ok = s.literal("false");
                break;
            case 'n':
                ok = s.literal("null");
                break;
            default:
                ok = s.number();
                break;
        }
        if (!ok) return JsonCheck::Invalid;
        // After a value: close containers, or go on to the next member / element.
        for (;;) {
            s.skip_space();
            if (nesting.depth() == 0) return s.at_end() ? JsonCheck::Valid : JsonCheck::Invalid;
            if (nesting.in_object()) {
                if (s.take('}')) {
                    nesting.pop();
                    continue;
                }
                if (!s.take(',')) return JsonCheck::Invalid;
                s.skip_space();
                if (!s.string()) return JsonCheck::Invalid;
                s.skip_space();
                if (!s.take(':')) return JsonCheck::Invalid;
            } else {
                if (s.take(']')) {
                    nesting.pop();
                    continue;
                }
                if (!s.take(',')) return JsonCheck::Invalid;
            }
            break;
        }
    }
}

}  // namespace

JsonCheck check_json_value(std::string_view text, NestingBits bits) noexcept {
    Scanner s(text);
    return check_value(s, bits);
}

JsonCheck check_json_value(std::string_view text) noexcept {
    std::uint64_t words[kMaxCheckedDepth / 64];
    return check_json_value(text, NestingBits{words, kMaxCheckedDepth / 64});
}

JsonCheck check_outbox_content(std::string_view content, OutboxContent *out,
                               NestingBits bits) noexcept {
    if (content.size() < kContentTopicStart.size() + 2 + kContentPayloadStart.size() + 2 ||
        content.substr(0, kContentTopicStart.size()) != kContentTopicStart || content.back() != '}')
        return JsonCheck::Invalid;
    std::string_view rest = content.substr(kContentTopicStart.size());
    rest.remove_suffix(1);  // the closing brace
    Scanner s(rest);
    if (!s.string()) return JsonCheck::Invalid;
    std::string_view topic = rest.substr(0, s.offset(rest));
    rest.remove_prefix(topic.size());
    if (rest.substr(0, kContentPayloadStart.size()) != kContentPayloadStart)
        return JsonCheck::Invalid;
    std::string_view payload = rest.substr(kContentPayloadStart.size());
    JsonCheck check = check_json_value(payload, bits);
    if (check == JsonCheck::Invalid) return check;
    *out = OutboxContent{topic, payload, content.substr(1, content.size() - 2)};
    return check;
}

JsonCheck check_outbox_content(std::string_view content, OutboxContent *out) noexcept {
    std::uint64_t words[kMaxCheckedDepth / 64];
    return check_outbox_content(content, out, NestingBits{words, kMaxCheckedDepth / 64});
}

}  // namespace idem::core
