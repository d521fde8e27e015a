// The library refuses to run against SQL objects of another version of the extension.
//
// A new library is installed, and loaded by every backend, before ALTER EXTENSION idempotency
// UPDATE brings each database's tables and functions to its version; until then its C++ code
// could misread a table. Every SQL-callable function (IDEM_FUNCTION) checks first that the
// version installed in the database (pg_extension.extversion) is the library's; the answer is
// cached per backend and read again only after a relcache or pg_proc invalidation (every
// upgrade script changes a table or a function), so the hot path pays one branch.
#pragma once

namespace idem::pg {

// The version the library was built for (idempotency.control's default_version).
const char *library_version();

// Raises SqlError 55000 unless the database has the library's version of the extension (or
// no idempotency extension, or is running an extension script right now).
void require_schema_version();

}  // namespace idem::pg
