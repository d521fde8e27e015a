// Citus awareness: on a Citus node a distributed table's own relation is an empty shell (its
// rows live in shard relations), so the direct storage path must never read or write it, and
// a key call must run where the key's shard is.
#pragma once

#include "pg/postgres_headers.hpp"

namespace idem::pg {

// Whether `relation` is a Citus table (distributed, reference or Citus-managed local) in
// this database, from pg_dist_partition; false where Citus is not installed. Reads the
// catalog directly (no SPI): callers cache the verdict until the relation's relcache entry
// is invalidated, which Citus does when it distributes or undistributes a table.
bool is_citus_table(Oid relation) noexcept;

// Whether this node is a Citus worker (its group id in pg_dist_local_group is not 0).
bool is_citus_worker();

// The local relation of the shard of `table` (idempotency.keys, distributed by Citus) that
// holds `scope`, or InvalidOid when that shard is placed on another node. Computed with
// Citus's own shard lookup and pg_dist_placement, without SPI or Citus's planner; the answer
// is reused within the statement, and the placement of the shard until Citus invalidates it
// (see forget_key_shards). C-style: errors are raised with ereport.
Oid local_key_shard(Oid table, Datum scope) noexcept;

// Forgets the shards of the key table looked up so far when `relation` is the key table, one
// of those shards, or InvalidOid (all relations); for a relcache invalidation callback.
void forget_key_shards(Oid relation) noexcept;

// Raises an error unless the shard of `table` that holds `scope` has a placement on this
// node, so that the key's advisory lock is taken where its row lives.
void check_shard_is_local(Oid table, Datum scope);

}  // namespace idem::pg
