// WAL-position keys of the outbox: 128 bits, (commit LSN, message LSN).
//
// commit_lsn is where the transaction's commit record starts (what logical decoding calls the
// commit LSN, txn->final_lsn); lsn is where the message's WAL record ends (the message_lsn
// decoding hands to the message callback, and what pg_logical_emit_message returns).
//
// Why keys are unique and strictly increasing in stream order:
//  - decoding outputs whole transactions in commit-record order, and two commit records
//    never start at the same LSN: commit_lsn strictly increases from one transaction to the
//    next, and a transaction's keys all sort after the previous transaction's;
//  - within a transaction messages come in WAL order and two records never end at the same
//    LSN: lsn strictly increases while commit_lsn stays;
//  - a message record ends at or before the start of its transaction's commit record, so
//    lsn <= commit_lsn. The last message often ends exactly where the commit record starts
//    (lsn == commit_lsn): the pair still differs from every other key, because its first
//    half belongs to this transaction only. lsn alone is not unique (it may also equal the
//    commit_lsn of an other transaction), which is why the key carries both halves.
// The 16 bytes are commit_lsn then lsn, each big-endian, so byte order (uuid order) is
// key order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace idem::core {

struct LsnKey {
    std::uint64_t commit_lsn;
    std::uint64_t lsn;
};

using LsnKeyBytes = std::array<std::uint8_t, 16>;

constexpr std::size_t kLsnKeyHexLength = 32;   // lowercase hex digits, no separators
constexpr std::size_t kLsnTextMaxLength = 17;  // "FFFFFFFF/FFFFFFFF"

// The uniqueness rule: a key the plugin can produce has lsn <= commit_lsn.
bool is_valid_lsn_key(LsnKey key) noexcept;

// Throws Error(InvalidParameter) unless is_valid_lsn_key(key).
void check_lsn_key(LsnKey key);

// Strict order of keys (commit_lsn first, then lsn): the order of the stream.
bool lsn_key_less(LsnKey a, LsnKey b) noexcept;

LsnKeyBytes encode_lsn_key(LsnKey key) noexcept;
LsnKey decode_lsn_key(const LsnKeyBytes &bytes) noexcept;

// Writes the 32 lowercase hex digits of the key (no terminator).
void write_lsn_key_hex(LsnKey key, char *out) noexcept;

// Parses 32 hex digits (any case); std::nullopt for anything else.
std::optional<LsnKey> parse_lsn_key_hex(std::string_view text) noexcept;

// Writes an LSN as PostgreSQL prints it ("16/B374D848": upper-case hex, no leading zeros);
// returns the number of characters written (at most kLsnTextMaxLength, no terminator).
std::size_t write_lsn_text(std::uint64_t lsn, char *out) noexcept;

}  // namespace idem::core
