// The hot path of key_store without SPI or the executor: the probe reads the leaf partitions'
// primary-key indexes, the insert writes heap and indexes of the routed partition. The
// benchmark (bench/pages/key-lifecycle.md) showed SPI's per-statement executor setup, and the
// parsing of the table's CHECK constraints on every INSERT, costing more than the rest of a
// request.
//
// Both handle only the table shape the install script creates (range partitions on
// expires_at, heap leaves, the 13 columns, no triggers, row security or extra constraints;
// extra indexes are fine); for anything else they answer kUnsupported and key_store goes
// through SPI, which gives the same results (and the same errors). Like key_store, they
// expect SPI to be connected and hold no C++ objects, so PostgreSQL errors may pass through.
#pragma once

#include "pg/storage/key_store.hpp"

namespace idem::pg {

enum class Direct { kFound, kNotFound, kUnsupported };

// find_live_key through the indexes, with the snapshot and command counter SPI would use;
// the relations are locked in `lock`.
Direct find_live_key_direct(Oid table, LOCKMODE lock, Datum scope, Datum key, TimestampTz now,
                            KeyRecord *record, Snapshot snapshot);

// insert_key into the partition that takes record's expires_at: kFound once inserted.
// Values that break one of the table's constraints are kUnsupported, so that SPI's INSERT
// raises the constraint's own error.
Direct insert_key_direct(Oid table, const KeyRecord &record) noexcept;

}  // namespace idem::pg
