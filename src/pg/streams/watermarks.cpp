// accept, watermark, position_numeric: constant-space duplicate detection for consumers.
//
// idempotency.consumer_positions holds one row per (consumer, partition): the highest
// position accepted, as 16 big-endian bytes in a uuid column, so that uuid order (memcmp) is
// the unsigned numeric order of 128-bit positions and a bigint position is the same number
// zero-extended. accept runs
//   UPDATE ... SET position = new WHERE ... AND position < new
// and, if that moved nothing (first message, duplicate, or a row not there yet),
//   INSERT ... ON CONFLICT (consumer, partition) DO UPDATE ... WHERE stored < new
// which inserts the first position or locks the row and judges against it. Either statement
// waits for a concurrent writer of the row and re-checks its newest version (READ
// COMMITTED), or fails with a serialization failure (REPEATABLE READ and above). So of two
// sessions accepting the same position exactly one gets true, and the loser's check sees the
// winner's commit (or the row as it was, if the winner rolled back).

#include "pg/guard.hpp"
#include "pg/storage/key_store.hpp"
#include "pg/sql_errors.hpp"

#include "core/position.hpp"

#include <cstring>

extern "C" {
#include "utils/numeric.h"
#include "utils/uuid.h"
}

namespace idem::pg {

namespace {

// The common case, a position above the watermark: one UPDATE (a HOT update, one WAL record).
constexpr const char *kAdvanceSql =
    "UPDATE idempotency.consumer_positions SET position = $3"
    " WHERE consumer OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2"
    " AND position OPERATOR(pg_catalog.<) $3";

// Otherwise (first message of a partition, a duplicate, or a row inserted concurrently):
// the upsert decides.
constexpr const char *kAcceptSql =
    "INSERT INTO idempotency.consumer_positions AS w (consumer, partition, position)"
    " VALUES ($1, $2, $3) ON CONFLICT (consumer, partition)"
    " DO UPDATE SET position = EXCLUDED.position"
    " WHERE w.position OPERATOR(pg_catalog.<) EXCLUDED.position";

constexpr const char *kWatermarkSql =
    "SELECT position FROM idempotency.consumer_positions"
    " WHERE consumer OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2";

SPIPlanPtr advance_plan, accept_plan, watermark_plan;

Datum uuid_datum(const core::Position &position) {
    pg_uuid_t *uuid = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    std::memcpy(uuid->data, position.data(), UUID_LEN);
    return UUIDPGetDatum(uuid);
}

bool accept(FunctionCallInfo fcinfo, Datum position) {
    Datum consumer = name_arg(fcinfo, 0, "consumer");
    Datum partition = name_arg(fcinfo, 1, "partition");
    // Before the table is touched, as reserve does: our own 25006, naming the function (a
    // standby's transactions are read-only too).
    PreventCommandIfReadOnly("idempotency.accept()");
    Storage storage = open_storage();
    Oid types[] = {TEXTOID, TEXTOID, UUIDOID};
    Datum args[] = {consumer, partition, position};
    int rc =
        SPI_execute_plan(saved_plan(&advance_plan, kAdvanceSql, 3, types), args, nullptr, false, 0);
    if (rc != SPI_OK_UPDATE)
        elog(ERROR, "idempotency: SPI_execute_plan failed: %s", SPI_result_code_string(rc));
    bool accepted = SPI_processed == 1;
    if (!accepted) {
        rc = SPI_execute_plan(saved_plan(&accept_plan, kAcceptSql, 3, types), args, nullptr, false,
                              0);
        if (rc != SPI_OK_INSERT)
            elog(ERROR, "idempotency: SPI_execute_plan failed: %s", SPI_result_code_string(rc));
        accepted = SPI_processed == 1;
    }
    close_storage(storage);
    return accepted;
}

Datum numeric_of(const pg_uuid_t *uuid) {
    char digits[48];
    {
        core::Position position;
        std::memcpy(position.data(), uuid->data, UUID_LEN);
        std::string text = core::position_decimal(position);
        std::memcpy(digits, text.c_str(), text.size() + 1);
    }
    return DirectFunctionCall3(numeric_in, CStringGetDatum(digits), ObjectIdGetDatum(InvalidOid),
                               Int32GetDatum(-1));
}

}  // namespace

IDEM_FUNCTION(idem_accept_bigint) {
    int64 value = DatumGetInt64(required_arg(fcinfo, 2, "position"));
    return BoolGetDatum(accept(fcinfo, uuid_datum(core::position_from_int64(value))));
}

IDEM_FUNCTION(idem_accept_uuid) {
    return BoolGetDatum(accept(fcinfo, required_arg(fcinfo, 2, "position")));
}

IDEM_FUNCTION(idem_watermark) {
    Datum consumer = name_arg(fcinfo, 0, "consumer");
    Datum partition = name_arg(fcinfo, 1, "partition");
    MemoryContext caller = CurrentMemoryContext;
    Storage storage = open_storage();
    Oid types[] = {TEXTOID, TEXTOID};
    Datum args[] = {consumer, partition};
    int rc = SPI_execute_plan(saved_plan(&watermark_plan, kWatermarkSql, 2, types), args, nullptr,
                              true, 1);
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "idempotency: SPI_execute_plan failed: %s", SPI_result_code_string(rc));
    pg_uuid_t position;
    bool found = SPI_processed == 1;
    if (found) {
        bool isnull;
        Datum value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
        std::memcpy(&position, DatumGetUUIDP(value), sizeof position);
    }
    close_storage(storage);
    MemoryContextSwitchTo(caller);
    if (!found) PG_RETURN_NULL();
    return numeric_of(&position);
}

IDEM_FUNCTION(idem_position_numeric) {
    return numeric_of(PG_GETARG_UUID_P(0));
}

}  // namespace idem::pg
