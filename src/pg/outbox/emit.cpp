// emit(topic, payload): the outbox's write side, one transactional logical message.

#include "pg/compat.hpp"
#include "pg/guard.hpp"
#include "pg/outbox/output_plugin.hpp"
#include "pg/sql_errors.hpp"

#include "core/outbox_content.hpp"

extern "C" {
#include "access/xlog.h"
#include "replication/message.h"
#include "tcop/utility.h"
#include "utils/json.h"
#include "utils/pg_lsn.h"
}

namespace idem::pg {
namespace {

// The message content (see output_plugin.hpp), palloc'd.
StringInfo outbox_content(const text *topic, Jsonb *payload) {
    StringInfo content = makeStringInfo();
    appendBinaryStringInfo(content, core::kContentTopicStart.data(),
                           int(core::kContentTopicStart.size()));
    escape_json(content, text_to_cstring(topic));
    appendBinaryStringInfo(content, core::kContentPayloadStart.data(),
                           int(core::kContentPayloadStart.size()));
    (void)JsonbToCString(content, &payload->root, VARSIZE(payload));
    appendStringInfoChar(content, '}');
    return content;
}

}  // namespace
}  // namespace idem::pg

using namespace idem::pg;

// Holds no C++ object across PostgreSQL calls: they may ereport directly.
IDEM_FUNCTION(idem_emit) {
    const text *topic = DatumGetTextPP(name_arg(fcinfo, 0, "topic"));
    Jsonb *payload = DatumGetJsonbP(required_arg(fcinfo, 1, "payload"));
    if (!XLogLogicalInfoActive())
        throw SqlError(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                       "idempotency.emit requires wal_level = logical",
                       "Messages written at a lower wal_level can never be decoded.",
                       "Set wal_level = logical in postgresql.conf and restart the server.");
    PreventCommandIfReadOnly("idempotency.emit()");
    PreventCommandDuringRecovery("idempotency.emit()");
    StringInfo content = outbox_content(topic, payload);
    // The plugin's output line adds up to 256 bytes and must fit one allocation.
    if (Size(content->len) > MaxAllocSize - 512)
        raise_sql(ERRCODE_PROGRAM_LIMIT_EXCEEDED, "message is too large to decode (%d bytes)",
                  content->len);
    XLogRecPtr lsn = compat::log_logical_message(kOutboxPrefix, content->data, content->len, true);
    PG_RETURN_LSN(lsn);
}
