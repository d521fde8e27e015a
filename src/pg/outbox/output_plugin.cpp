// The logical decoding output plugin `idempotency`: one JSON line per message written by
// idempotency.emit in a committed transaction, keyed by (commit LSN, message LSN).
//
// Options: topics 'a,b' (only these topics; default all), framing on|off (BEGIN / COMMIT
// lines around each transaction that has output; default off).
// Row changes, truncates, non-transactional messages and other prefixes are skipped. No
// streaming or two-phase callbacks are set, so PostgreSQL never hands us an in-progress
// transaction: the commit LSN, the first half of every key, is always known.
//
// PostgreSQL calls these callbacks directly: they are written C-style (plain structs, palloc,
// ereport), and the core functions they call are noexcept.

#include "pg/postgres_headers.hpp"
#include "pg/fault_points.hpp"
#include "pg/outbox/output_plugin.hpp"
#include "pg/guard.hpp"

#include "core/lsn_key.hpp"
#include "core/outbox_content.hpp"

extern "C" {
#include "mb/pg_wchar.h"
#include "replication/logical.h"
#include "replication/output_plugin.h"
#include "utils/json.h"
}

#include <cstring>
#include <type_traits>

namespace idem::pg {
namespace {

constexpr int kProgressEvery = 100;  // skipped changes between progress reports

struct Topic {
    const char *json;  // the topic as a JSON string, quotes included
    int len;
};

struct PluginState {
    MemoryContext scratch;  // reset after every message
    Topic *topics;          // nullptr: every topic
    int ntopics;
    bool framing;
    int skipped_changes;

    // The transaction being replayed.
    bool txn_ready;  // the strings below are filled
    bool begin_written;
    int64 messages;
    char commit_hex[16];
    StringInfoData mid;   // ,"commit_lsn":"C","lsn":"
    StringInfoData tail;  // ","xid":N,"commit_time":"T"}
    StringInfoData when;  // "xid":N,"commit_lsn":"C","commit_time":"T"  (framing)

    bool have_last;  // keys must strictly increase over the session
    core::LsnKey last;
};

PluginState *state_of(LogicalDecodingContext *ctx) noexcept {
    return static_cast<PluginState *>(ctx->output_plugin_private);
}

// printf arguments for "%X/%X" (LSN_FORMAT_ARGS does not compile as C++).
uint32 hi(uint64 lsn) noexcept {
    return uint32(lsn >> 32);
}
uint32 lo(uint64 lsn) noexcept {
    return uint32(lsn);
}

void append_lsn(StringInfo out, XLogRecPtr lsn) noexcept {
    char text[core::kLsnTextMaxLength];
    appendBinaryStringInfo(out, text, int(core::write_lsn_text(lsn, text)));
}

// --- options ---------------------------------------------------------------------------------

bool bool_option(DefElem *option) noexcept {
    if (option->arg == nullptr) return true;
    bool value;
    if (!parse_bool(strVal(option->arg), &value))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("could not parse value \"%s\" for parameter \"%s\"",
                               strVal(option->arg), option->defname),
                        errhint("Use on or off.")));
    return value;
}

bool is_space(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// "a, b,c" -> topics a, b, c as JSON strings (the form emit writes).
void parse_topics(PluginState *state, DefElem *option) noexcept {
    if (option->arg == nullptr)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("option \"topics\" needs a value"),
                        errhint("Give a comma-separated list of topics.")));
    const char *list = strVal(option->arg);
    int capacity = 1;
    for (const char *p = list; *p; p++) capacity += (*p == ',');
    state->topics = static_cast<Topic *>(palloc(sizeof(Topic) * capacity));
    state->ntopics = 0;
    const char *start = list;
    for (;;) {
        const char *end = start;
        while (*end && *end != ',') end++;
        const char *first = start, *last = end;
        while (first < last && is_space(*first)) first++;
        while (last > first && is_space(last[-1])) last--;
        if (first == last)
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("option \"topics\" has an empty topic: \"%s\"", list),
                            errhint("Give a comma-separated list of non-empty topics.")));
        StringInfoData json;
        initStringInfo(&json);
        escape_json(&json, pnstrdup(first, last - first));
        state->topics[state->ntopics++] = Topic{json.data, json.len};
        if (*end == '\0') break;
        start = end + 1;
    }
}

void parse_options(LogicalDecodingContext *ctx, PluginState *state) noexcept {
    ListCell *cell;
    foreach (cell, ctx->output_plugin_options) {
        DefElem *option = static_cast<DefElem *>(lfirst(cell));
        if (strcmp(option->defname, "topics") == 0) {
            parse_topics(state, option);
        } else if (strcmp(option->defname, "framing") == 0) {
            state->framing = bool_option(option);
        } else {
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("option \"%s\" is unknown to output plugin idempotency",
                                   option->defname),
                            errhint("The options are topics and framing.")));
        }
    }
}

// --- message content -------------------------------------------------------------------------

// A line adds less than 256 bytes to the content (key, LSNs, xid, commit time); the text
// datum of the SQL functions must stay within MaxAllocSize too.
constexpr Size kMaxContentSize = MaxAllocSize - 256;

enum class Content { Valid, Forged, TooLarge };

// Splits the content written by emit. Never calls PostgreSQL's JSON parser, which recurses
// and would raise "stack depth limit exceeded" here on deeply nested content, an error that
// would stop the slot at that message for good.
Content parse_content(const char *message, Size size, core::OutboxContent *out) noexcept {
    if (size > kMaxContentSize) return Content::TooLarge;
    if (!pg_verifymbstr(message, int(size), true)) return Content::Forged;
    std::string_view content(message, size);
    switch (core::check_outbox_content(content, out)) {
        case core::JsonCheck::Valid:
            return Content::Valid;
        case core::JsonCheck::Invalid:
            return Content::Forged;
        case core::JsonCheck::TooDeep:
            break;
    }
    // Deeper than the checker's own bits: again with one bit per byte, enough for any depth.
    size_t words = core::nesting_words_for(size);
    auto *bits = static_cast<uint64_t *>(palloc(words * sizeof(uint64_t)));
    return core::check_outbox_content(content, out, core::NestingBits{bits, words}) ==
                   core::JsonCheck::Valid
               ? Content::Valid
               : Content::Forged;
}

bool topic_wanted(const PluginState *state, const core::OutboxContent &content) noexcept {
    if (state->topics == nullptr) return true;
    for (int i = 0; i < state->ntopics; i++)
        if (size_t(state->topics[i].len) == content.topic.size() &&
            memcmp(state->topics[i].json, content.topic.data(), content.topic.size()) == 0)
            return true;
    return false;
}

// --- output ----------------------------------------------------------------------------------

// Fills the per-transaction strings, once per transaction with output.
void prepare_txn(PluginState *state, ReorderBufferTXN *txn) noexcept {
    const char *commit_time = JsonEncodeDateTime(
        nullptr, TimestampTzGetDatum(txn->xact_time.commit_time), TIMESTAMPTZOID, nullptr);
    core::LsnKey first{txn->final_lsn, 0};
    char key_hex[core::kLsnKeyHexLength];
    core::write_lsn_key_hex(first, key_hex);
    memcpy(state->commit_hex, key_hex, sizeof state->commit_hex);

    resetStringInfo(&state->mid);
    appendStringInfoString(&state->mid, ",\"commit_lsn\":\"");
    append_lsn(&state->mid, txn->final_lsn);
    appendStringInfoString(&state->mid, "\",\"lsn\":\"");

    resetStringInfo(&state->tail);
    appendStringInfo(&state->tail, "\",\"xid\":%u,\"commit_time\":\"%s\"}", txn->xid, commit_time);

    resetStringInfo(&state->when);
    appendStringInfo(&state->when, "\"xid\":%u,\"commit_lsn\":\"", txn->xid);
    append_lsn(&state->when, txn->final_lsn);
    appendStringInfo(&state->when, "\",\"commit_time\":\"%s\"", commit_time);
    state->txn_ready = true;
}

void check_order(PluginState *state, core::LsnKey key) noexcept {
    if (!core::is_valid_lsn_key(key) || (state->have_last && !core::lsn_key_less(state->last, key)))
        elog(ERROR, "idempotency: key (%X/%X, %X/%X) does not follow (%X/%X, %X/%X) in the stream",
             hi(key.commit_lsn), lo(key.commit_lsn), hi(key.lsn), lo(key.lsn),
             hi(state->last.commit_lsn), lo(state->last.commit_lsn), hi(state->last.lsn),
             lo(state->last.lsn));
    state->last = key;
    state->have_last = true;
}

void write_begin(LogicalDecodingContext *ctx, PluginState *state) noexcept {
    OutputPluginPrepareWrite(ctx, false);
    appendStringInfoString(ctx->out, "{\"action\":\"begin\",");
    appendBinaryStringInfo(ctx->out, state->when.data, state->when.len);
    appendStringInfoChar(ctx->out, '}');
    OutputPluginWrite(ctx, false);
    state->begin_written = true;
}

void write_message(LogicalDecodingContext *ctx, PluginState *state,
                   const core::OutboxContent &content, XLogRecPtr lsn) noexcept {
    StringInfo out = ctx->out;
    char lsn_hex[core::kLsnKeyHexLength];
    core::write_lsn_key_hex(core::LsnKey{0, lsn}, lsn_hex);
    OutputPluginPrepareWrite(ctx, true);
    appendStringInfoString(out, "{\"key\":\"");
    appendBinaryStringInfo(out, state->commit_hex, 16);
    appendBinaryStringInfo(out, lsn_hex + 16, 16);
    appendStringInfoString(out, "\",");
    appendBinaryStringInfo(out, content.members.data(), int(content.members.size()));
    appendBinaryStringInfo(out, state->mid.data, state->mid.len);
    append_lsn(out, lsn);
    appendBinaryStringInfo(out, state->tail.data, state->tail.len);
    OutputPluginWrite(ctx, true);
}

// --- callbacks -------------------------------------------------------------------------------

void on_startup(LogicalDecodingContext *ctx, OutputPluginOptions *opt, bool is_init) noexcept {
    auto *state = static_cast<PluginState *>(palloc0(sizeof(PluginState)));
    state->scratch =
        AllocSetContextCreate(ctx->context, "idempotency output plugin", ALLOCSET_DEFAULT_SIZES);
    initStringInfo(&state->mid);
    initStringInfo(&state->tail);
    initStringInfo(&state->when);
    ctx->output_plugin_private = state;
    opt->output_type = OUTPUT_PLUGIN_TEXTUAL_OUTPUT;
    opt->receive_rewrites = false;
    // Whole committed transactions only (see the top of this file).
    ctx->streaming = false;
    ctx->twophase = false;
    parse_options(ctx, state);
}

void on_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn) noexcept {
    PluginState *state = state_of(ctx);
    state->txn_ready = false;
    state->begin_written = false;
    state->messages = 0;
}

// Lets the walsender send keepalives (and the client confirm) through long runs of changes
// that produce no output.
void skipped_change(LogicalDecodingContext *ctx) noexcept {
    PluginState *state = state_of(ctx);
    if (++state->skipped_changes >= kProgressEvery) {
        state->skipped_changes = 0;
        OutputPluginUpdateProgress(ctx, false);
    }
}

void on_change(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, Relation relation,
               ReorderBufferChange *change) noexcept {
    skipped_change(ctx);
}

void on_message(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, XLogRecPtr message_lsn,
                bool transactional, const char *prefix, Size message_size,
                const char *message) noexcept {
    PluginState *state = state_of(ctx);
    if (!transactional || strcmp(prefix, kOutboxPrefix) != 0) {
        skipped_change(ctx);
        return;
    }
    MemoryContext caller = MemoryContextSwitchTo(state->scratch);
    // Alive across PostgreSQL calls that may raise errors (guard.hpp, rule 4): nothing to
    // destroy.
    static_assert(std::is_trivially_destructible_v<core::OutboxContent>);
    core::OutboxContent content;
    Content parsed = parse_content(message, message_size, &content);
    if (parsed == Content::TooLarge) {
        ereport(WARNING,
                (errmsg("idempotency: skipped a message too large to decode"),
                 errdetail("The message at %X/%X has %zu bytes; an output line is limited to "
                           "%zu bytes of content.",
                           hi(message_lsn), lo(message_lsn), message_size, kMaxContentSize)));
    } else if (parsed == Content::Forged) {
        ereport(WARNING,
                (errmsg("idempotency: skipped a message that idempotency.emit did not write"),
                 errdetail("The message at %X/%X has the prefix \"%s\" but its content is not "
                           "{\"topic\":...,\"payload\":...}.",
                           hi(message_lsn), lo(message_lsn), kOutboxPrefix)));
    } else if (topic_wanted(state, content)) {
        check_order(state, core::LsnKey{txn->final_lsn, message_lsn});
        IDEM_FAULT_POINT("decode-message");
        if (!state->txn_ready) prepare_txn(state, txn);
        if (state->framing && !state->begin_written) write_begin(ctx, state);
        write_message(ctx, state, content, message_lsn);
        state->messages++;
    } else {
        skipped_change(ctx);
    }
    MemoryContextSwitchTo(caller);
    MemoryContextReset(state->scratch);
}

void on_commit(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, XLogRecPtr commit_lsn) noexcept {
    PluginState *state = state_of(ctx);
    bool wrote = state->messages > 0;
    OutputPluginUpdateProgress(ctx, !wrote);
    if (!state->framing || !state->begin_written) return;
    OutputPluginPrepareWrite(ctx, true);
    appendStringInfoString(ctx->out, "{\"action\":\"commit\",");
    appendBinaryStringInfo(ctx->out, state->when.data, state->when.len);
    appendStringInfoString(ctx->out, ",\"end_lsn\":\"");
    append_lsn(ctx->out, txn->end_lsn);
    appendStringInfo(ctx->out, "\",\"messages\":" INT64_FORMAT "}", state->messages);
    OutputPluginWrite(ctx, true);
}

}  // namespace
}  // namespace idem::pg

extern "C" {
PGDLLEXPORT void _PG_output_plugin_init(OutputPluginCallbacks *cb);
}

void _PG_output_plugin_init(OutputPluginCallbacks *cb) {
    static_assert(std::is_same_v<decltype(&_PG_output_plugin_init), LogicalOutputPluginInit>);
    cb->startup_cb = idem::pg::pg_callback(idem::pg::on_startup);
    cb->begin_cb = idem::pg::pg_callback(idem::pg::on_begin);
    cb->change_cb = idem::pg::pg_callback(idem::pg::on_change);
    cb->message_cb = idem::pg::pg_callback(idem::pg::on_message);
    cb->commit_cb = idem::pg::pg_callback(idem::pg::on_commit);
    // No truncate (nothing to output), no two-phase and no stream_* callbacks: PostgreSQL
    // then decodes each transaction once, at its commit.
}
