#include "pg/schema_version.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

#ifndef IDEM_SCHEMA_VERSION
#error "IDEM_SCHEMA_VERSION (idempotency.control's default_version) must be defined"
#endif

namespace idem::pg {
namespace {

// The verdict for this backend's database; cleared by any relcache or pg_proc invalidation.
bool checked = false;
bool matches = true;
char installed[64];

void forget_relcache(Datum, Oid) noexcept {
    checked = false;
}
void forget_syscache(Datum, int, uint32) noexcept {
    checked = false;
}

// pg_extension.extversion of idempotency, or false when the extension is not installed.
bool read_installed_version(char *out, size_t size) {
    Oid ext = get_extension_oid("idempotency", true);
    if (!OidIsValid(ext)) return false;
    Relation rel = table_open(ExtensionRelationId, AccessShareLock);
    ScanKeyData key;
    ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(ext));
    SysScanDesc scan = systable_beginscan(rel, ExtensionOidIndexId, true, nullptr, 1, &key);
    HeapTuple tuple = systable_getnext(scan);
    bool found = HeapTupleIsValid(tuple);
    if (found) {
        bool isnull = true;
        Datum d = heap_getattr(tuple, Anum_pg_extension_extversion, RelationGetDescr(rel), &isnull);
        found = !isnull;
        if (found) strlcpy(out, TextDatumGetCString(d), size);
    }
    systable_endscan(scan);
    table_close(rel, AccessShareLock);
    return found;
}

}  // namespace

const char *library_version() {
    return IDEM_SCHEMA_VERSION;
}

void require_schema_version() {
    // The extension's own scripts (CREATE EXTENSION, ALTER EXTENSION UPDATE) may call the
    // library while the version is being changed.
    if (creating_extension) return;
    if (!checked) {
        static bool registered = false;
        if (!registered) {
            CacheRegisterRelcacheCallback(pg_callback(forget_relcache), (Datum)0);
            CacheRegisterSyscacheCallback(PROCOID, pg_callback(forget_syscache), (Datum)0);
            registered = true;
        }
        installed[0] = '\0';
        matches = !read_installed_version(installed, sizeof installed) ||
                  strcmp(installed, IDEM_SCHEMA_VERSION) == 0;
        checked = true;
    }
    if (matches) return;
    char message[256], hint[256];
    snprintf(message, sizeof message,
             "idempotency %s is installed in this database, but the loaded library is %s",
             installed, IDEM_SCHEMA_VERSION);
    snprintf(hint, sizeof hint, "Run ALTER EXTENSION idempotency UPDATE TO '%s' in this database.",
             IDEM_SCHEMA_VERSION);
    throw SqlError(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, message,
                   "The library refuses every call until the extension's SQL objects are of its "
                   "version.",
                   hint);
}

}  // namespace idem::pg
