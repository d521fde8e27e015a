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
#include "pg/spi.hpp"
#include "pg/storage/key_store.hpp"
#include "pg/sql_errors.hpp"

#include "core/position.hpp"

#include <cstring>

extern "C" {
#include "catalog/namespace.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/uuid.h"
}

namespace idem::pg {

namespace {

// The common case, a position above the watermark: one UPDATE (a HOT update, one WAL record:
// moved_at is not indexed, and the table's fillfactor leaves room on the page).
constexpr const char *kAdvanceSql =
    "UPDATE idempotency.consumer_positions SET position = $3, moved_at = pg_catalog.now()"
    " WHERE consumer OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2"
    " AND position OPERATOR(pg_catalog.<) $3";

// Otherwise (first message of a partition, a duplicate, or a row inserted concurrently):
// the upsert decides.
constexpr const char *kAcceptSql =
    "INSERT INTO idempotency.consumer_positions AS w (consumer, partition, position, moved_at)"
    " VALUES ($1, $2, $3, pg_catalog.now()) ON CONFLICT (consumer, partition)"
    " DO UPDATE SET position = EXCLUDED.position, moved_at = EXCLUDED.moved_at"
    " WHERE w.position OPERATOR(pg_catalog.<) EXCLUDED.position";

constexpr const char *kWatermarkSql =
    "SELECT position FROM idempotency.consumer_positions"
    " WHERE consumer OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2";

// set_watermark: any position, backwards included; the row's lock serialises it with accept.
constexpr const char *kSetSql =
    "INSERT INTO idempotency.consumer_positions AS w (consumer, partition, position, moved_at)"
    " VALUES ($1, $2, $3, pg_catalog.now()) ON CONFLICT (consumer, partition)"
    " DO UPDATE SET position = EXCLUDED.position, moved_at = EXCLUDED.moved_at";

// A consumer exists while it has a watermark in some partition. FOR KEY SHARE: a concurrent
// drop_consumer waits for set_watermark (or removes the rows first, and the check fails).
constexpr const char *kConsumerExistsSql =
    "SELECT 1 FROM idempotency.consumer_positions"
    " WHERE consumer OPERATOR(pg_catalog.=) $1 LIMIT 1 FOR KEY SHARE";

constexpr const char *kDropConsumerSql =
    "DELETE FROM idempotency.consumer_positions WHERE consumer OPERATOR(pg_catalog.=) $1";

SPIPlanPtr advance_plan, accept_plan, watermark_plan, set_plan, exists_plan, drop_plan;

Datum uuid_datum(const core::Position &position) {
    pg_uuid_t *uuid = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    std::memcpy(uuid->data, position.data(), UUID_LEN);
    return UUIDPGetDatum(uuid);
}

// A bigint position argument as the 128-bit position it stands for.
Datum bigint_position_arg(FunctionCallInfo fcinfo) {
    int64 value = DatumGetInt64(required_arg(fcinfo, 2, "position"));
    return uuid_datum(core::position_from_int64(value));
}

// The (consumer, partition, position) arguments of a watermark write into args, checked before
// the table is touched, as reserve does: our own 25006 naming the function (a standby's
// transactions are read-only too).
void watermark_write_args(FunctionCallInfo fcinfo, Datum position, const char *function,
                          Datum (&args)[3]) {
    args[0] = name_arg(fcinfo, 0, "consumer");
    args[1] = name_arg(fcinfo, 1, "partition");
    args[2] = position;
    PreventCommandIfReadOnly(function);
}

constexpr Oid kWatermarkTypes[] = {TEXTOID, TEXTOID, UUIDOID};

bool accept(FunctionCallInfo fcinfo, Datum position) {
    Datum args[3];
    watermark_write_args(fcinfo, position, "idempotency.accept()", args);
    Storage storage = open_storage();
    SPIPlanPtr advance = saved_plan(&advance_plan, kAdvanceSql, 3, kWatermarkTypes);
    spi_check(SPI_execute_plan(advance, args, nullptr, false, 0), SPI_OK_UPDATE,
              "SPI_execute_plan");
    bool accepted = SPI_processed == 1;
    if (!accepted) {
        SPIPlanPtr upsert = saved_plan(&accept_plan, kAcceptSql, 3, kWatermarkTypes);
        spi_check(SPI_execute_plan(upsert, args, nullptr, false, 0), SPI_OK_INSERT,
                  "SPI_execute_plan");
        accepted = SPI_processed == 1;
    }
    close_storage(storage);
    return accepted;
}

[[noreturn]] void unknown_consumer(Datum consumer) {
    char name[256 + 1];
    text_to_cstring_buffer(DatumGetTextPP(consumer), name, sizeof name);
    throw SqlError(ERRCODE_UNDEFINED_OBJECT, psprintf("consumer \"%s\" does not exist", name),
                   "It has no watermark in any partition.",
                   "A consumer comes into being with its first accept.");
}

void set_watermark(FunctionCallInfo fcinfo, Datum position) {
    Datum args[3];
    watermark_write_args(fcinfo, position, "idempotency.set_watermark()", args);
    Storage storage = open_storage();
    spi_check(SPI_execute_plan(saved_plan(&exists_plan, kConsumerExistsSql, 1, kWatermarkTypes),
                               args, nullptr, false, 1),
              SPI_OK_SELECT, "SPI_execute_plan");
    bool known = SPI_processed == 1;
    if (known)
        spi_check(SPI_execute_plan(saved_plan(&set_plan, kSetSql, 3, kWatermarkTypes), args,
                                   nullptr, false, 0),
                  SPI_OK_INSERT, "SPI_execute_plan");
    close_storage(storage);
    if (!known) unknown_consumer(args[0]);
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
    return BoolGetDatum(accept(fcinfo, bigint_position_arg(fcinfo)));
}

IDEM_FUNCTION(idem_accept_uuid) {
    return BoolGetDatum(accept(fcinfo, required_arg(fcinfo, 2, "position")));
}

IDEM_FUNCTION(idem_set_watermark_bigint) {
    set_watermark(fcinfo, bigint_position_arg(fcinfo));
    PG_RETURN_VOID();
}

IDEM_FUNCTION(idem_set_watermark_uuid) {
    set_watermark(fcinfo, required_arg(fcinfo, 2, "position"));
    PG_RETURN_VOID();
}

// Removes every watermark of the consumer; returns how many partitions it had.
IDEM_FUNCTION(idem_drop_consumer) {
    Datum consumer = name_arg(fcinfo, 0, "consumer");
    PreventCommandIfReadOnly("idempotency.drop_consumer()");
    Storage storage = open_storage();
    Oid types[] = {TEXTOID};
    Datum args[] = {consumer};
    spi_check(SPI_execute_plan(saved_plan(&drop_plan, kDropConsumerSql, 1, types), args, nullptr,
                               false, 0),
              SPI_OK_DELETE, "SPI_execute_plan");
    int64 dropped = int64(SPI_processed);
    close_storage(storage);
    if (dropped == 0) unknown_consumer(consumer);
    PG_RETURN_INT64(dropped);
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
    spi_check(rc, SPI_OK_SELECT, "SPI_execute_plan");
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
