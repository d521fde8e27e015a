#!/usr/bin/env bash
# A physical backup (pg_basebackup -X stream) of a cluster with keys in every state, streams
# and watermarks (the databases of backup_common.bash: one maintained by the worker while the
# backup runs, one whose keys pg_partman manages), started as a server of its own: every key
# and watermark reads back identical, next_key continues above every value handed out before
# the backup, accept of an old position is false.
FORMAT=physical PORT=54477
source "$(dirname "${BASH_SOURCE[0]}")/backup_common.bash"

cluster_setup "test-cluster/backup-$FORMAT" "$PORT"
COPY_DATA=$(dirname "$CLUSTER_DATA")/copy COPY_PORT=$((CLUSTER_PORT + 1))
COPY_SOCK=/tmp/idempotency-$COPY_PORT
on_exit 'cluster_stop "$COPY_DATA" >/dev/null 2>&1'
start_source_cluster
setup_sources
for src in src_m src_p; do snapshot $src "$WORK/snap-$src"; done

cluster_stop "$COPY_DATA" >/dev/null 2>&1 || true
rm -rf "$COPY_DATA" "$COPY_SOCK"
mkdir -m 0700 "$COPY_SOCK"
if is_root; then chown postgres: "$COPY_SOCK"; fi
as_pg "$PGBIN/pg_basebackup" -D "$COPY_DATA" -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" \
  -U postgres -X stream -c fast --no-sync || fail "pg_basebackup failed"
passed "pg_basebackup -X stream while the worker runs"
# The source goes on handing out values; the copy must not care.
q -d src_m -c "SELECT idempotency.next_key('orders')" >/dev/null
{
  echo "port = $COPY_PORT"
  echo "unix_socket_directories = '$COPY_SOCK'"
} | as_pg tee -a "$COPY_DATA/postgresql.conf" >/dev/null
cluster_start "$COPY_DATA"
# From here on q talks to the copy.
CLUSTER_DATA=$COPY_DATA CLUSTER_PORT=$COPY_PORT CLUSTER_SOCK=$COPY_SOCK
for src in src_m src_p; do check_restored "$WORK/snap-$src" $src "$src: pg_basebackup copy"; done
echo "backup_physical: $CHECKS checks passed"
