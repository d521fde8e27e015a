#!/usr/bin/env bash
# The key table at production size (bench/pages/scale.md): the extension's idempotency.keys and
# the hand-written pattern's table, loaded with the same retained keys, at each size of SIZES:
#  - new keys and replays per second (pgbench, CLIENTS clients, ROUNDS rounds with the order
#    rotated), p50 / p99 latency; replays drawn as retries arrive (90% from the last five
#    minutes' keys, 10% from any) and uniformly (the cold worst case);
#  - bytes per key (heap, TOAST, indexes) after the load, and the growth per new key written by
#    the key calls themselves; WAL bytes (and full-page images) per new key;
#  - autovacuum over a sustained run of new keys on each table (runs, their time, dead rows);
# and at the largest size, the key calls' latency timeline while maintain() drops an expired
# partition of DROP_KEYS keys and creates the next ones.
#   bash bench/scale.sh             SIZES="1000000 10000000" (about 40 minutes on 2 cores)
#   bash bench/scale.sh --smoke     tiny sizes, a fixed number of transactions (a minute)
# Keys are loaded with INSERT ... SELECT into idempotency.keys (routed to the partitions, whose
# primary keys are dropped before and built again after), then copied into the hand-written
# table before its indexes are built; 22 hours of a 24-hour retention (the oldest key expires
# 2 hours after the load, so no loaded key expires during the run).
# Knobs (environment): SIZES, CLIENTS ("8 32"), ROUNDS (3), DURATION (10 s per run),
# SHARED_BUFFERS (512MB), PARTITION_WIDTH (1d), DROP_KEYS (the largest size), SUSTAIN (60 s),
# TIMELINE (20 s), WRITTEN (100,000 keys), SCALE_OUT (bench/out/scale), BENCH_BUILD (1: build and install first).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
BENCH=$IDEM_ROOT/bench

SMOKE=0
[[ ${1:-} == --smoke ]] && SMOKE=1
SIZES=${SIZES:-1000000 10000000}
CLIENTS=${CLIENTS:-8 32}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
SUSTAIN=${SUSTAIN:-60}
TIMELINE=${TIMELINE:-20}
WRITTEN=${WRITTEN:-100000}
TXNS=""   # smoke: a fixed number of transactions per client instead of a duration
if [[ $SMOKE == 1 ]]; then
  SIZES="3000 9000" CLIENTS=2 ROUNDS=1 TXNS=50 WRITTEN=400
fi
LARGEST=$(tr ' ' '\n' <<<"$SIZES" | sort -n | tail -n1)
DROP_KEYS=${DROP_KEYS:-$LARGEST}
SHARED_BUFFERS=${SHARED_BUFFERS:-512MB}
PARTITION_WIDTH=${PARTITION_WIDTH:-1d}
OUT=${SCALE_OUT:-$BENCH/out/scale$([[ $SMOKE == 1 ]] && echo -smoke || true)}
RETENTION_S=86400
LOADED_S=$((22 * 3600))

width_s() {
  local v=${1%[a-z]*} u=${1##*[0-9]}
  case $u in s) echo "$v" ;; min) echo $((v * 60)) ;; h) echo $((v * 3600)) ;; d) echo $((v * 86400)) ;;
    *) die "PARTITION_WIDTH: $1 (units s, min, h, d)" ;; esac
}
WIDTH_S=$(width_s "$PARTITION_WIDTH")
# Partitions for every retained key's expiry and a day beyond, as a deployment with this width
# and retention needs (keys beyond the premade ones would land in the default partition).
PREMAKE=$(((RETENTION_S + 86400) / WIDTH_S + 1))

# REUSE=1: the cluster a run left (stopped) with LARGEST keys loaded, STEPS run again on it
# into the same folder (say "autovacuum timeline" after a run that stopped before them).
REUSE=${REUSE:-0}
STEPS=${STEPS:-throughput autovacuum timeline written}
[[ $REUSE == 1 ]] || rm -rf "$OUT"
mkdir -p "$OUT/logs"
[[ ${BENCH_BUILD:-1} == 1 ]] && IDEM_WERROR=1 build_and_install >&2
cluster_setup bench-scale 54468
cleanup() { cluster_stop "$CLUSTER_DATA" || true; }
trap cleanup EXIT
[[ $REUSE == 1 ]] || cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
  "shared_buffers = '$SHARED_BUFFERS'" "wal_level = replica" "max_wal_size = '4GB'" \
  "checkpoint_timeout = '15min'" "synchronous_commit = off" "maintenance_work_mem = '1GB'" \
  "max_connections = 120" "autovacuum_naptime = '10s'" "log_autovacuum_min_duration = 0" \
  "log_checkpoints = on" "idempotency.partition_width = '$PARTITION_WIDTH'" \
  "idempotency.premake = $PREMAKE" "idempotency.database = ''"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
SERVER_LOG=$(dirname "$CLUSTER_DATA")/server.log
export PGHOST=$CLUSTER_SOCK PGPORT=$CLUSTER_PORT PGUSER=postgres PGDATABASE=postgres
q() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
now_s() { date +%s.%N; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# Tab-separated results, turned into scale.md at the end.
[[ $REUSE == 1 ]] && q -c "ALTER EXTENSION idempotency UPDATE"
[[ $REUSE == 1 ]] || printf 'size\tround\tclients\tworkload\ttps\ttxns\tp50_ms\tp99_ms\twal_bytes\twal_fpi\tload\n' >"$OUT/runs.tsv"
[[ $REUSE == 1 ]] || printf 'size\ttable\trows\theap\ttoast\tprimary_key\tother_indexes\tnew_key_partition_index\n' >"$OUT/sizes.tsv"
[[ $REUSE == 1 ]] || printf 'size\ttable\tnew_keys\tgrowth_bytes\theap\ttoast\tprimary_key\tother_indexes\n' >"$OUT/growth.tsv"
[[ $REUSE == 1 && -f $OUT/written.tsv ]] || printf 'table\tkeys\theap\ttoast\tprimary_key\tother_indexes\n' >"$OUT/written.tsv"
[[ $REUSE == 1 ]] || printf 'size\ttable\tseconds\ttxns\tautovacuum_runs\tautovacuum_s\tautoanalyze_runs\tdead_rows_after\tupdates\thot_updates\n' >"$OUT/autovacuum.tsv"

# Total bytes of a table's relations of one kind: heap, toast, primary key, other indexes.
sizes_of() {
  local rels=$1
  q -F $'\t' -c "WITH r AS ($rels)
    SELECT coalesce(sum(pg_relation_size(c.oid)), 0),
      coalesce(sum((SELECT pg_total_relation_size(c.reltoastrelid) WHERE c.reltoastrelid <> 0)), 0),
      coalesce(sum((SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i
        WHERE i.indrelid = c.oid AND i.indisprimary)), 0),
      coalesce(sum((SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i
        WHERE i.indrelid = c.oid AND NOT i.indisprimary)), 0)
    FROM pg_class c JOIN r ON c.oid = r.oid"
}
EXT_RELS="SELECT inhrelid AS oid FROM pg_inherits WHERE inhparent = 'idempotency.keys'::regclass"
HW_RELS="SELECT 'bench.hw_keys'::regclass::oid AS oid"
total_bytes() { sizes_of "$1" | awk -F'\t' '{ printf "%.0f\n", $1 + $2 + $3 + $4 }'; }
# growth_row SIZE TABLE KEYS "BEFORE" "AFTER": a growth.tsv line (BEFORE, AFTER: sizes_of's
# four fields).
growth_row() {
  awk -v s="$1" -v t="$2" -v k="$3" -v b="$4" -v a="$5" 'BEGIN { split(b, x, "\t"); split(a, y, "\t")
    printf "%s\t%s\t%s\t%.0f", s, t, k, y[1] + y[2] + y[3] + y[4] - x[1] - x[2] - x[3] - x[4]
    for (i = 1; i <= 4; i++) printf "\t%.0f", y[i] - x[i]; print "" }'
}

# The partition a key first requested now goes to, and its index's size.
NEW_KEY_PARTITION="(SELECT c.oid FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  WHERE i.inhparent = 'idempotency.keys'::regclass
    AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
    AND now() + interval '24 hours' >= (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz
    AND now() + interval '24 hours' < (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz)"

# The hand-written table's indexes (built after its load).
HW_INDEXES=(-c "ALTER TABLE bench.hw_keys ADD PRIMARY KEY (scope, key)"
  -c "CREATE INDEX hw_keys_created_at ON bench.hw_keys (created_at)")

# load N: both tables emptied and loaded with keys 1..N.
load() {
  local n=$1 t0 step chunk lo hi started
  started=$(now_s)
  t0=$(q -c "SELECT extract(epoch FROM now()) - $LOADED_S")
  step=$(awk -v s="$LOADED_S" -v n="$n" 'BEGIN { printf "%.9f", s / n }')
  sed -e "s/@T0@/$t0/" -e "s/@STEP@/$step/" "$BENCH/scale/schema.sql" | q >/dev/null
  q -c "TRUNCATE idempotency.keys" -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null
  # The partitions' primary keys, dropped for the load and built again after it.
  q -F $'\t' -c "SELECT conrelid::regclass, conname, pg_get_constraintdef(oid) FROM pg_constraint
    WHERE contype = 'p' AND conrelid IN ($EXT_RELS)" >"$OUT/pkeys.tsv"
  while IFS=$'\t' read -r rel name _; do
    q -c "ALTER TABLE $rel DROP CONSTRAINT $name"
  done <"$OUT/pkeys.tsv"
  chunk=1000000
  for ((lo = 1; lo <= n; lo += chunk)); do
    hi=$((lo + chunk - 1 < n ? lo + chunk - 1 : n))
    q -c "INSERT INTO idempotency.keys (scope, key, state, attempt, request_hash, status_code,
            response, first_seen_at, completed_at, expires_at)
          SELECT 'bench', bench.key_of(i, s), 'completed', 1, bench.hash_of(i), 200,
                 bench.response_of(i), s, s + interval '40 ms', s + interval '24 hours'
          FROM generate_series($lo, $hi) AS i, LATERAL (SELECT bench.seen_at(i) AS s) AS t"
  done
  q -c "INSERT INTO bench.hw_keys (scope, key, request_hash, status, response_code, response_body,
          created_at, updated_at, locked_until)
        SELECT scope, key, request_hash, state, status_code, response, first_seen_at, completed_at,
               NULL FROM idempotency.keys"
  while IFS=$'\t' read -r rel name def; do
    q -c "ALTER TABLE $rel ADD CONSTRAINT $name $def"
  done <"$OUT/pkeys.tsv"
  q "${HW_INDEXES[@]}"
  q -c "VACUUM ANALYZE idempotency.keys, bench.hw_keys" -c CHECKPOINT
  log "loaded $n keys into both tables in $(awk -v a="$started" -v b="$(now_s)" 'BEGIN { printf "%.0f", b - a }') s"
}

# Every loaded key replays on both tables (first, middle, last), and a fresh key is new.
check_keys() {
  local n=$1 i
  for i in 1 $(((n + 1) / 2)) "$n"; do
    [[ $(q -c "BEGIN" -c "SELECT outcome FROM idempotency.reserve('bench', bench.key_of($i, bench.seen_at($i)), bench.hash_of($i))" -c "ROLLBACK") == replay ]] ||
      die "loaded key $i does not replay on the extension"
    [[ $(q -c "SELECT status FROM bench.hw_keys WHERE scope = 'bench' AND key = bench.key_of($i, bench.seen_at($i))") == completed ]] ||
      die "loaded key $i is not in the hand-written table"
  done
  [[ $(q -c "BEGIN" -c "SELECT outcome FROM idempotency.reserve('bench', 'fresh', NULL)" -c "ROLLBACK") == new ]] ||
    die "a fresh key is not new"
}

wal() { q -F ' ' -c "SELECT wal_bytes, wal_fpi FROM pg_stat_wal"; }

RUN=$((REUSE * 500))
# pgbench_run TAG SCRIPT CLIENTS KEYS [length args]: runs it with transaction logs; sets RESULT
# to "tps txns p50_ms p99_ms". (Not in a subshell: RUN numbers each run's new keys.)
pgbench_run() {
  local tag=$1 script=$2 c=$3 keys=$4 out
  shift 4
  RUN=$((RUN + 1))
  local length=(-T "$DURATION")
  [[ -n $TXNS ]] && length=(-t "$TXNS")
  [[ $# -gt 0 ]] && length=("$@")
  out=$OUT/logs/$tag.txt
  "$PGBIN/pgbench" -n -M prepared -c "$c" -j 2 "${length[@]}" -D run="$RUN" -D n=0 \
    -D keys="$keys" -D recent=$((keys * 300 / RETENTION_S + 1)) -l --log-prefix="$OUT/logs/$tag" \
    -f "$BENCH/scale/$script.sql" >"$out" 2>&1 || { cat "$out" >&2; die "pgbench failed: $tag"; }
  if grep -q "aborted" "$out"; then cat "$out" >&2; die "pgbench clients aborted: $tag"; fi
  local tps txns
  tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' "$out")
  txns=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$out")
  RESULT=$(cat "$OUT/logs/$tag".[0-9]* | awk '{ print $3 }' | sort -n | awk -v tps="$tps" -v txns="$txns" '
    { v[NR] = $1 } END { printf "%.0f %d %.3f %.3f\n", tps, txns, v[int(NR * 0.5) + 1] / 1000,
      v[int(NR * 0.99) + (NR * 0.99 > int(NR * 0.99))] / 1000 }')
  [[ -n $tps && -n $txns ]] || die "no tps in $out"
}

# The same new-key runs' growth of each table, for bytes per key as the key calls write them.
declare -A NEW_KEYS
measure_size() {
  local size=$1 workloads=(ext_new hw_new ext_recent hw_recent ext_uniform hw_uniform) round c w tag
  local before_ext before_hw
  check_keys "$size"
  read -r -a ext < <(sizes_of "$EXT_RELS")
  read -r -a hw < <(sizes_of "$HW_RELS")
  local hot
  hot=$(q -c "SELECT coalesce(sum(pg_indexes_size(oid)), 0) FROM $NEW_KEY_PARTITION AS p(oid)")
  printf '%s\text\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$size" "${ext[@]}" "$hot" >>"$OUT/sizes.tsv"
  printf '%s\thw\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$size" "${hw[@]}" \
    "$(q -c "SELECT pg_relation_size('bench.hw_keys_pkey')")" >>"$OUT/sizes.tsv"
  NEW_KEYS[ext]=0 NEW_KEYS[hw]=0
  before_ext=$(sizes_of "$EXT_RELS")
  before_hw=$(sizes_of "$HW_RELS")
  local n=0 total=$((ROUNDS * $(wc -w <<<"$CLIENTS") * ${#workloads[@]}))
  for round in $(seq 1 "$ROUNDS"); do
    local order=("${workloads[@]:$(((round - 1) % ${#workloads[@]}))}" "${workloads[@]:0:$(((round - 1) % ${#workloads[@]}))}")
    for c in $CLIENTS; do
      for w in "${order[@]}"; do
        n=$((n + 1))
        tag=s$size-r$round-c$c-$w
        q -c CHECKPOINT
        read -r wal0 fpi0 < <(wal)
        local load
        load=$(loadavg)
        pgbench_run "$tag" "$w" "$c" "$size"
        read -r tps txns p50 p99 <<<"$RESULT"
        read -r wal1 fpi1 < <(wal)
        [[ $w == *_new ]] && NEW_KEYS[${w%_new}]=$((NEW_KEYS[${w%_new}] + txns))
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$round" "$c" "$w" "$tps" \
          "$txns" "$p50" "$p99" $((wal1 - wal0)) $((fpi1 - fpi0)) "$load" >>"$OUT/runs.tsv"
        printf '[%3d/%d] %-34s %8s tps  p50 %7s ms  p99 %7s ms  load %s\n' "$n" "$total" "$tag" \
          "$tps" "$p50" "$p99" "$load" >&2
      done
    done
  done
  growth_row "$size" ext "${NEW_KEYS[ext]}" "$before_ext" "$(sizes_of "$EXT_RELS")" >>"$OUT/growth.tsv"
  growth_row "$size" hw "${NEW_KEYS[hw]}" "$before_hw" "$(sizes_of "$HW_RELS")" >>"$OUT/growth.tsv"
}

# Bytes per key as the key calls write them from empty tables (no bulk-built index whose
# packed leaves the first random inserts split): WRITTEN new keys through each table's
# new-key workload at 8 clients, in a database of its own.
written() {
  local table per_client=$((WRITTEN / 8 + 1))
  q -c "DROP DATABASE IF EXISTS written" -c "CREATE DATABASE written" >/dev/null
  sed -e "s/@T0@/$(q -c "SELECT extract(epoch FROM now())")/" -e "s/@STEP@/1/" "$BENCH/scale/schema.sql" |
    q -d written >/dev/null
  q -d written -c "SELECT count(*) FROM idempotency.maintain()" "${HW_INDEXES[@]}" >/dev/null
  for table in ext hw; do
    PGDATABASE=written pgbench_run written-$table ${table}_new 8 1 -t "$per_client"
    read -r -a got < <(PGDATABASE=written sizes_of "$([[ $table == ext ]] && echo "$EXT_RELS" || echo "$HW_RELS")")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$table" $((per_client * 8)) "${got[@]}" >>"$OUT/written.tsv"
  done
}

# Sustained new keys on each table in turn, with autovacuum as configured (naptime 10 s):
# its runs on that table from the server log (those started within a naptime after the run
# count too: they were due during it), and the dead rows left.
AV_GRACE=${AV_GRACE:-11}
[[ $SMOKE == 1 ]] && AV_GRACE=0
autovacuum_run() {
  local size=$1 table w rel pattern offset txns runs secs t0 t1
  for table in ext hw; do
    w=${table}_new
    if [[ $table == ext ]]; then rel="$EXT_RELS" pattern='automatic vacuum of table "postgres.idempotency.keys_'
    else rel="$HW_RELS" pattern='automatic vacuum of table "postgres.bench.hw_keys"'; fi
    local stats="SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(n_tup_upd), 0),
      coalesce(sum(n_tup_hot_upd), 0), coalesce(sum(autoanalyze_count), 0)
      FROM pg_stat_user_tables WHERE relid IN ($rel)"
    read -r _ upd0 hot0 an0 < <(q -F ' ' -c "$stats")
    offset=$(($(stat -c %s "$SERVER_LOG") + 1))
    local length=(-T "$SUSTAIN")
    [[ -n $TXNS ]] && length=(-t $((TXNS * 4)))
    t0=$(now_s)
    pgbench_run "s$size-sustained-$w" "$w" 8 "$size" "${length[@]}"
    t1=$(now_s)
    read -r _ txns _ _ <<<"$RESULT"
    sleep "$AV_GRACE"
    read -r dead upd1 hot1 an1 < <(q -F ' ' -c "$stats")
    # A vacuum's report spans lines; its last, "system usage: ... elapsed: S s", ends it.
    read -r runs secs < <(tail -c +"$offset" "$SERVER_LOG" | awk -v p="$pattern" '
      index($0, p) { on = 1; n++ }
      on && /elapsed: / { match($0, /elapsed: [0-9.]+/); s += substr($0, RSTART + 9, RLENGTH - 9); on = 0 }
      END { printf "%d %.2f\n", n, s }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$table" \
      "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')" "$txns" "$runs" "$secs" \
      $((an1 - an0)) "$dead" $((upd1 - upd0)) $((hot1 - hot0)) >>"$OUT/autovacuum.tsv"
  done
}

# At the largest size: an expired partition of DROP_KEYS keys (as yesterday's would be), then
# maintain() while 8 clients make new keys and replays; every call's latency against the time
# maintain() ran.
timeline() {
  local size=$1 lo hi name c=8 txns per_client started ended
  lo=$(q -c "SELECT to_timestamp((floor(extract(epoch FROM now()) / $WIDTH_S) - 1) * $WIDTH_S)")
  hi=$(q -c "SELECT to_timestamp(floor(extract(epoch FROM now()) / $WIDTH_S) * $WIDTH_S)")
  name=keys_expired_bench
  q -c "CREATE TABLE idempotency.$name PARTITION OF idempotency.keys FOR VALUES FROM ('$lo') TO ('$hi')"
  q -c "ALTER TABLE idempotency.$name DROP CONSTRAINT ${name}_pkey" 2>/dev/null || true
  q -c "INSERT INTO idempotency.$name (scope, key, state, attempt, request_hash, status_code,
          response, first_seen_at, completed_at, expires_at)
        SELECT 'bench', 'expired-' || bench.key_of(i, s), 'completed', 1, bench.hash_of(i), 200,
               bench.response_of(i), s - interval '24 hours', s - interval '24 hours',
               '$lo'::timestamptz + (i - 1) * ('$hi'::timestamptz - '$lo'::timestamptz) / $DROP_KEYS
        FROM generate_series(1, $DROP_KEYS) AS i, LATERAL (SELECT bench.seen_at(i) AS s) AS t" \
    -c "ALTER TABLE idempotency.$name ADD PRIMARY KEY (key, scope, expires_at)" \
    -c "VACUUM ANALYZE idempotency.$name" -c CHECKPOINT
  local dropped_bytes
  dropped_bytes=$(q -c "SELECT pg_total_relation_size('idempotency.$name')")
  # Long enough for TIMELINE seconds at the rate measured at this size.
  local rate
  rate=$(awk -F'\t' -v s="$size" '$1 == s && $3 == 8 && ($4 == "ext_new" || $4 == "ext_recent") { t += $5; k++ }
    END { print (k ? t / k : 1000) }' "$OUT/runs.tsv")
  per_client=$(awk -v r="$rate" -v t="$TIMELINE" -v c="$c" 'BEGIN { printf "%d", r * t / c + 1 }')
  [[ -n $TXNS ]] && per_client=$((TXNS * 4))
  local commits0 tag=s$size-timeline
  commits0=$(q -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'")
  "$PGBIN/pgbench" -n -M prepared -c "$c" -j 2 -t "$per_client" -D run=999 -D n=0 \
    -D keys="$size" -D recent=$((size * 300 / RETENTION_S + 1)) -l --log-prefix="$OUT/logs/$tag" \
    -f "$BENCH/scale/ext_new.sql@1" -f "$BENCH/scale/ext_recent.sql@1" >"$OUT/logs/$tag.txt" 2>&1 &
  local pgbench_pid=$!
  # maintain() once a quarter of the transactions are done (the run is well under way).
  local target=$((c * per_client / 4)) i
  for i in $(seq 1 600); do
    (($(q -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'") - commits0 >= target)) && break
    sleep 0.1
  done
  # What the calls wait on meanwhile: every 5 ms, the wait events of the active client
  # backends and who holds or waits for an exclusive lock of idempotency.keys; lock waits
  # past 10 ms are logged too (log_lock_waits).
  q -c "DROP TABLE IF EXISTS bench.waits, bench.sampler_stop" \
    -c "CREATE TABLE bench.waits (at timestamptz, pid int, what text, wait text, query text)" \
    -c "CREATE TABLE bench.sampler_stop ()" \
    -c "ALTER SYSTEM SET log_lock_waits = on" -c "ALTER SYSTEM SET deadlock_timeout = '10ms'" \
    -c "SELECT pg_reload_conf()" >/dev/null
  local log_from
  log_from=$(wc -l <"$SERVER_LOG")
  q -c "DO \$\$ BEGIN
      WHILE NOT EXISTS (SELECT FROM bench.sampler_stop) LOOP
        PERFORM pg_stat_clear_snapshot();
        INSERT INTO bench.waits SELECT clock_timestamp(), a.pid, 'activity',
            a.wait_event_type || ':' || a.wait_event, left(a.query, 60)
          FROM pg_stat_activity a
          WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()
            AND a.state = 'active' AND a.wait_event_type IS NOT NULL;
        INSERT INTO bench.waits SELECT clock_timestamp(), l.pid,
            CASE WHEN l.granted THEN 'holds' ELSE 'awaits' END, l.mode, NULL
          FROM pg_locks l
          WHERE l.relation = 'idempotency.keys'::regclass AND l.mode = 'AccessExclusiveLock';
        PERFORM pg_sleep(0.005);
      END LOOP; END \$\$" &
  local sampler_pid=$!
  started=$(now_s)
  q -F $'\t' -c "SET idempotency.premake = $((PREMAKE + 2))" \
    -c "SELECT action, partition, rows FROM idempotency.maintain()" >"$OUT/maintain.tsv"
  ended=$(now_s)
  q -c "INSERT INTO bench.sampler_stop DEFAULT VALUES" >/dev/null
  wait "$sampler_pid"
  q -c "ALTER SYSTEM RESET log_lock_waits" -c "ALTER SYSTEM RESET deadlock_timeout" \
    -c "SELECT pg_reload_conf()" >/dev/null
  # Samples during maintain(): per kind and wait, how many and from how many backends; the
  # span over which maintain() held or awaited the exclusive lock.
  q -F $'\t' -c "SELECT what, coalesce(wait, '-'), count(*), count(DISTINCT pid),
        round(extract(epoch FROM min(at)) - $started, 3), round(extract(epoch FROM max(at)) - $started, 3)
      FROM bench.waits WHERE at BETWEEN to_timestamp($started) AND to_timestamp($ended)
      GROUP BY 1, 2 ORDER BY 1, 3 DESC" >"$OUT/timeline-waits.tsv"
  tail -n +"$((log_from + 1))" "$SERVER_LOG" | grep -E 'still waiting|acquired' >"$OUT/timeline-lock-waits.log" || true
  wait "$pgbench_pid" || { cat "$OUT/logs/$tag.txt" >&2; die "pgbench failed: $tag"; }
  grep -qP "^dropped\t[^\t]*$name" "$OUT/maintain.tsv" || { cat "$OUT/maintain.tsv" >&2; die "maintain() did not drop $name"; }
  # Per call: end time (epoch s) and latency (ms); calls that overlapped maintain() are those
  # that ended after it started and began before it ended.
  cat "$OUT/logs/$tag".[0-9]* | awk -v a="$started" -v b="$ended" -v out="$OUT/timeline.tsv" \
    -v size="$size" -v dropped_rows="$DROP_KEYS" -v dropped_bytes="$dropped_bytes" -v created="$(grep -c '^created' "$OUT/maintain.tsv")" '
    { t_end = $5 + $6 / 1e6; lat = $3 / 1000; t_start = t_end - lat / 1000
      n++; if (t_end >= a && t_start <= b) { over++; if (lat > omax) omax = lat; if (lat > 50) slow++ }
      else if (lat > rmax) rmax = lat
      if (first == "" || t_end < first) first = t_end
      if (t_end > last) last = t_end
      b10 = (t_end - a) * 10; bucket = (b10 < 0 && b10 != int(b10)) ? int(b10) - 1 : int(b10); if (!(bucket in bmax) || lat > bmax[bucket]) bmax[bucket] = lat; bn[bucket]++ }
    END {
      printf "size\t%d\nmaintain_ms\t%.1f\ncalls\t%d\ncalls_during\t%d\nmax_ms_during\t%.2f\nover_50ms\t%d\nmax_ms_other\t%.2f\nrun_from_s\t%.1f\nrun_to_s\t%.1f\ndropped_rows\t%d\ndropped_bytes\t%.0f\ncreated\t%d\n",
        size, (b - a) * 1000, n, over, omax, slow + 0, rmax, first - a, last - a, dropped_rows, dropped_bytes, created
      for (k in bmax) printf "bucket\t%.1f\t%d\t%.2f\n", k / 10, bn[k], bmax[k] > (out ".buckets")
    }' >"$OUT/timeline.tsv"
  sort -t$'\t' -k2,2n "$OUT/timeline.tsv.buckets" >"$OUT/timeline-buckets.tsv"
  rm -f "$OUT/timeline.tsv.buckets"
}

LENGTH="$DURATION s"
[[ -n $TXNS ]] && LENGTH="$TXNS transactions per client"
log "bench/scale: sizes $SIZES, clients $CLIENTS, $ROUNDS rounds of $LENGTH, partition width $PARTITION_WIDTH (premake $PREMAKE), shared_buffers $SHARED_BUFFERS"
wanted_step() { [[ " $STEPS " == *" $1 "* ]]; }
for size in $(tr ' ' '\n' <<<"$SIZES" | sort -n); do
  if [[ $REUSE == 1 ]]; then
    [[ $size == "$LARGEST" ]] || continue
  else
    load "$size"
  fi
  if wanted_step throughput; then measure_size "$size"; fi
  if wanted_step autovacuum; then autovacuum_run "$size"; fi
  if wanted_step timeline && [[ $size == "$LARGEST" ]]; then timeline "$size"; fi
done
if wanted_step written; then written; fi

{
  echo "date	$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit	$(git -C "$IDEM_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "server	$(q -c 'SHOW server_version')"
  echo "cpu	$(nproc) cores; memory $(free -g | awk '/^Mem:/ { print $2 " GiB" }')"
  echo "settings	shared_buffers $SHARED_BUFFERS, synchronous_commit off, wal_level replica, max_wal_size 4GB, autovacuum on (naptime 10s), partition width $PARTITION_WIDTH, premake $PREMAKE"
  echo "run	$LENGTH per run, $ROUNDS rounds, clients $CLIENTS, pgbench -M prepared -j 2, CHECKPOINT before each run"
  echo "load_after	$(loadavg)"
} >"$OUT/machine.tsv"
python3 "$BENCH/scale/report.py" "$OUT" >"$OUT/scale.md"
cat "$OUT/scale.md"
