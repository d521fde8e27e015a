// Logical replication of the extension's tables: refuse the publications that would lose keys.
//
// A publication carries idempotency.keys safely only through its root
// (publish_via_partition_root = true): a subscriber then applies every change to its own
// idempotency.keys, whatever partitions it has, and maintain() moves rows out of the default
// partition as a delete and an insert through the root (attach_moving_default_rows), both
// published. Published leaf by leaf, the partitions maintain() creates later are tables the
// subscriber does not have (the subscription stops), or has under the same name without
// subscribing to them (their rows are skipped, silently). A publication of the extension's
// tables must also carry inserts, updates and deletes, and every column.
//
// check_publications() raises the first such problem (55000, with a hint). It runs from the
// event trigger idempotency_publication_guard after CREATE / ALTER PUBLICATION, so the
// statement fails before any key is published, and from maintain() before it creates
// partitions (a publication made before the extension, or with the trigger disabled): there
// the creation is reported 'failed' and new keys stay in the default partition, which every
// subscriber of the leaves has.
// C-style: errors are ereport()s, so maintain() can catch them in its subtransaction.

#include "pg/maintenance/maintenance.hpp"
#include "pg/spi.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "commands/event_trigger.h"
}

namespace idem::pg {

namespace {

// First problem per (publication, table): 1 a partition of idempotency.keys published on its
// own, 2 not every operation published, 3 a column list.
constexpr const char *kUnsafePublicationSql =
    "SELECT pt.pubname::pg_catalog.text,"
    " pg_catalog.quote_ident(pt.schemaname) OPERATOR(pg_catalog.||) '.'"
    " OPERATOR(pg_catalog.||) pg_catalog.quote_ident(pt.tablename),"
    " CASE WHEN i.inhrelid IS NOT NULL THEN 1"
    " WHEN NOT (p.pubinsert AND p.pubupdate AND p.pubdelete) THEN 2 ELSE 3 END"
    " FROM pg_catalog.pg_publication_tables pt"
    " JOIN pg_catalog.pg_publication p ON p.pubname OPERATOR(pg_catalog.=) pt.pubname"
    " JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) pt.schemaname"
    " JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid"
    " AND c.relname OPERATOR(pg_catalog.=) pt.tablename"
    " LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid OPERATOR(pg_catalog.=) c.oid"
    " AND i.inhparent OPERATOR(pg_catalog.=) $1"
    " LEFT JOIN pg_catalog.pg_publication_rel r ON r.prpubid OPERATOR(pg_catalog.=) p.oid"
    " AND r.prrelid OPERATOR(pg_catalog.=) c.oid"
    " WHERE i.inhrelid IS NOT NULL"
    " OR (n.nspname OPERATOR(pg_catalog.=) 'idempotency'"
    " AND c.relname OPERATOR(pg_catalog.=) ANY ('{keys,streams,consumer_positions}')"
    " AND (NOT (p.pubinsert AND p.pubupdate AND p.pubdelete) OR r.prattrs IS NOT NULL))"
    " ORDER BY 3, 1, 2 LIMIT 1";

}  // namespace

void check_publications() {
    Oid types[] = {OIDOID};
    Datum args[] = {ObjectIdGetDatum(key_table_oid())};
    int rc = SPI_execute_with_args(kUnsafePublicationSql, 1, types, args, nullptr, false, 1);
    spi_check(rc, SPI_OK_SELECT, "reading the publications");
    if (SPI_processed == 0) return;
    HeapTuple row = SPI_tuptable->vals[0];
    TupleDesc desc = SPI_tuptable->tupdesc;
    char *publication = SPI_getvalue(row, desc, 1);
    char *table = SPI_getvalue(row, desc, 2);
    int problem = atoi(SPI_getvalue(row, desc, 3));
    if (problem == 1)
        ereport(ERROR,
                (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                 errmsg("publication \"%s\" publishes %s, a partition of idempotency.keys, on "
                        "its own",
                        publication, table),
                 errdetail("A subscriber does not have the partitions maintain() creates later, "
                           "or has them without subscribing to them, and misses rows moved "
                           "between partitions: keys would be lost."),
                 errhint("Publish idempotency.keys through its root: ALTER PUBLICATION %s SET "
                         "(publish_via_partition_root = true), or create the publication WITH "
                         "(publish_via_partition_root = true). See docs/replication.md.",
                         quote_identifier(publication))));
    if (problem == 2)
        ereport(
            ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("publication \"%s\" does not publish every change of %s", publication, table),
             errdetail("Keys, bounds and watermarks change by insert, update and delete; a "
                       "subscriber that misses one kind holds stale or duplicate rows."),
             errhint("Publish insert, update and delete: ALTER PUBLICATION %s SET (publish = "
                     "'insert, update, delete, truncate').",
                     quote_identifier(publication))));
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("publication \"%s\" publishes only some columns of %s", publication, table),
             errdetail("A subscriber needs every column of the extension's tables."),
             errhint("Publish the table without a column list.")));
}

}  // namespace idem::pg

// The event trigger function of idempotency_publication_guard (ddl_command_end of CREATE and
// ALTER PUBLICATION): the statement fails if any publication would lose keys.
IDEM_FUNCTION(idem_publication_guard) {
    using namespace idem::pg;
    if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("idempotency.publication_guard() must be called as an event "
                               "trigger")));
    spi_connect();
    check_publications();
    SPI_finish();
    PG_RETURN_VOID();
}
