// lsn_key(commit_lsn, lsn) -> uuid and lsn_key_parts(uuid): the outbox key codec in SQL.

#include "pg/guard.hpp"
#include "pg/sql_errors.hpp"

#include "core/lsn_key.hpp"

extern "C" {
#include "access/htup_details.h"
#include "utils/pg_lsn.h"
#include "utils/uuid.h"
}

#include <cstring>

using namespace idem;
using namespace idem::pg;

IDEM_FUNCTION(idem_lsn_key) {
    core::LsnKey key{PG_GETARG_LSN(0), PG_GETARG_LSN(1)};
    core::check_lsn_key(key);
    core::LsnKeyBytes bytes = core::encode_lsn_key(key);
    auto *result = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    std::memcpy(result->data, bytes.data(), bytes.size());
    PG_RETURN_UUID_P(result);
}

IDEM_FUNCTION(idem_lsn_key_parts) {
    const pg_uuid_t *uuid = PG_GETARG_UUID_P(0);
    core::LsnKeyBytes bytes;
    std::memcpy(bytes.data(), uuid->data, bytes.size());
    core::LsnKey key = core::decode_lsn_key(bytes);
    if (!core::is_valid_lsn_key(key))
        throw SqlError(ERRCODE_INVALID_PARAMETER_VALUE, "uuid is not a WAL-position key",
                       "Its second half (the message LSN) is greater than its first half "
                       "(the commit LSN).",
                       "Keys come from the output plugin idempotency or from idempotency.lsn_key.");
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        raise_sql(ERRCODE_FEATURE_NOT_SUPPORTED, "lsn_key_parts must return a record");
    Datum values[2] = {LSNGetDatum(key.commit_lsn), LSNGetDatum(key.lsn)};
    bool nulls[2] = {false, false};
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}
