// The content of an outbox message, as idempotency.emit writes it:
//   {"topic":<topic as a JSON string>,"payload":<payload as jsonb prints it>}
// and the strict, allocation-free check the output plugin runs on it before copying its text
// into its output. Anyone allowed to call pg_logical_emit_message can write a message with the
// outbox prefix: without the check, content like {"topic":"t","payload":1,"key":"ffff..."}
// would put a forged key into the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace idem::core {

constexpr std::string_view kContentTopicStart = "{\"topic\":";      // then the topic string
constexpr std::string_view kContentPayloadStart = ",\"payload\":";  // then the payload, then }

enum class JsonCheck {
    Valid,
    Invalid,
    TooDeep,  // nested deeper than the checker's nesting bits reach: not checked
};

// Levels the checker follows with its own bits (on its stack).
constexpr std::size_t kMaxCheckedDepth = 65536;

// Caller-provided nesting bits, one per level, for text nested deeper than kMaxCheckedDepth.
struct NestingBits {
    std::uint64_t *words;
    std::size_t count;
};

// Words that make any text of `size` bytes checkable: it cannot nest deeper than its size.
constexpr std::size_t nesting_words_for(std::size_t size) {
    return size / 64 + 1;
}

// Is text exactly one JSON value (RFC 8259; whitespace around it allowed)? Bytes >= 0x80 are
// not checked: the caller verifies the encoding. No recursion: any depth costs the same stack.
// With bits, the checker follows bits.count * 64 levels instead of kMaxCheckedDepth.
JsonCheck check_json_value(std::string_view text) noexcept;
JsonCheck check_json_value(std::string_view text, NestingBits bits) noexcept;

// Offsets into the content of the parts the plugin copies.
struct OutboxContent {
    std::string_view topic;    // the JSON string, quotes included
    std::string_view payload;  // the JSON value
    std::string_view members;  // "topic":...,"payload":... (the content without its braces)
};

// Checks the layout above, that the topic is one JSON string and that the payload is one
// JSON value. On Valid and TooDeep (payload too deep for the nesting bits) *out is filled.
JsonCheck check_outbox_content(std::string_view content, OutboxContent *out) noexcept;
JsonCheck check_outbox_content(std::string_view content, OutboxContent *out,
                               NestingBits bits) noexcept;

}  // namespace idem::core
