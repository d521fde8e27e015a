// fingerprint, uuidv7, key_time: SQL wrappers around the core.

#include "pg/guard.hpp"
#include "pg/sql_errors.hpp"

#include "core/fingerprint.hpp"
#include "core/key_time.hpp"

#include <string>
#include <vector>

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/uuid.h"
}

namespace idem::pg {

namespace {

bytea *digest_bytea(const core::Sha256 &digest) {
    auto *result = static_cast<bytea *>(palloc(VARHDRSZ + digest.size()));
    SET_VARSIZE(result, VARHDRSZ + digest.size());
    memcpy(VARDATA(result), digest.data(), digest.size());
    return result;
}

}  // namespace

IDEM_FUNCTION(idem_fingerprint_jsonb) {
    Jsonb *body = PG_GETARG_JSONB_P(0);
    ArrayType *exclude = PG_GETARG_ARRAYTYPE_P(1);
    if (ARR_NDIM(exclude) > 1)
        raise_sql(ERRCODE_ARRAY_SUBSCRIPT_ERROR, "exclude must be a one-dimensional array");
    Datum *paths;
    bool *path_nulls;
    int path_count;
    deconstruct_array(exclude, TEXTOID, -1, false, TYPALIGN_INT, &paths, &path_nulls, &path_count);
    for (int i = 0; i < path_count; i++)
        if (path_nulls[i])
            raise_sql(ERRCODE_NULL_VALUE_NOT_ALLOWED, "exclude must not contain nulls");
    char *json = JsonbToCString(nullptr, &body->root, VARSIZE(body));
    // Every PostgreSQL call (detoasting) before the C++ scope below, whose vector must not be
    // alive when PostgreSQL may raise an error.
    auto *excluded_texts = static_cast<const text **>(palloc(sizeof(text *) * (path_count + 1)));
    for (int i = 0; i < path_count; i++) excluded_texts[i] = DatumGetTextPP(paths[i]);

    core::Sha256 digest;
    {
        std::vector<std::string> excluded;
        excluded.reserve(path_count);
        for (int i = 0; i < path_count; i++)
            excluded.emplace_back(VARDATA_ANY(excluded_texts[i]),
                                  VARSIZE_ANY_EXHDR(excluded_texts[i]));
        digest = core::fingerprint_json(json, excluded);
    }
    PG_RETURN_BYTEA_P(digest_bytea(digest));
}

IDEM_FUNCTION(idem_fingerprint_bytea) {
    const bytea *body = PG_GETARG_BYTEA_PP(0);
    core::Sha256 digest = core::sha256(text_view(body));
    PG_RETURN_BYTEA_P(digest_bytea(digest));
}

IDEM_FUNCTION(idem_uuidv7) {
    // 48 bits of milliseconds and 12 bits of sub-millisecond fraction ("ticks" of 1/4096 ms),
    // bumped past the last value so that keys of one backend strictly increase.
    static int64 last_ticks = 0;
    constexpr int64 kEpochShiftUs =
        int64(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
    int64 unix_us = GetCurrentTimestamp() + kEpochShiftUs;
    int64 ticks = (unix_us / 1000) * 4096 + (unix_us % 1000) * 4096 / 1000;
    if (ticks <= last_ticks) ticks = last_ticks + 1;
    last_ticks = ticks;
    std::array<uint8_t, 8> random;
    if (!pg_strong_random(random.data(), random.size()))
        raise_sql(ERRCODE_INTERNAL_ERROR, "could not generate random bytes");
    core::Uuid uuid = core::make_uuidv7(ticks / 4096, uint16_t(ticks % 4096), random);
    auto *result = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    memcpy(result->data, uuid.data(), uuid.size());
    PG_RETURN_UUID_P(result);
}

IDEM_FUNCTION(idem_key_time) {
    TimestampTz created;
    if (!key_creation_time(PG_GETARG_TEXT_PP(0), &created)) PG_RETURN_NULL();
    PG_RETURN_TIMESTAMPTZ(created);
}

}  // namespace idem::pg
