#!/usr/bin/env bash
# pg_regress and pg_isolation_regress against the coordinator of a three-node Citus cluster
# with idempotency.keys distributed: the Citus schedule (test/citus/schedule: sql/fingerprint
# and test/citus/sql/citus_lifecycle, expected output in test/citus/expected/; the other
# files of sql/ call the key functions through PL/pgSQL wrappers, which Citus does not
# delegate, so they are refused by design) and
# the isolation specs (test/isolation/specs named in test/citus/isolation_schedule, plus
# test/citus/isolation/specs: two coordinator sessions on one key). Specs with a step that
# waits for the key lock are left out: the lock is taken on a worker, where isolationtester
# cannot see the wait (semantics.sh covers waits and takeover with two real sessions).
set -euo pipefail
CITUS_NAME=citus-regress CITUS_PORT=54469
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT=$(mktemp -d /tmp/idem-citus-regress.XXXXXX)
on_exit 'rm -rf "$OUT"'
citus_setup
PGXS_DIR=$(dirname "$("$PG_CONFIG" --pgxs)")/..
cd "$IDEM_ROOT"
# Expected files of the Citus schedule: test/citus/expected first, else the single server's.
mkdir -p "$OUT/regress/expected" "$OUT/regress/sql" "$OUT/iso/specs" "$OUT/iso/expected"
cp -r sql/. test/citus/sql/. "$OUT/regress/sql/"
cp expected/*.out "$OUT/regress/expected/" 2>/dev/null || true
cp test/citus/expected/*.out "$OUT/regress/expected/" 2>/dev/null || true
cp test/isolation/specs/*.spec test/citus/isolation/specs/*.spec "$OUT/iso/specs/"
cp test/isolation/expected/*.out "$OUT/iso/expected/"
cp test/citus/isolation/expected/*.out "$OUT/iso/expected/" 2>/dev/null || true
rc=0
(cd "$OUT/regress" && "$PGXS_DIR/test/regress/pg_regress" --use-existing --host="$COORD_SOCK" \
  --port="$COORD_PORT" --user=postgres --dbname=postgres --inputdir=. --outputdir=. \
  --schedule="$IDEM_ROOT/test/citus/schedule" --bindir="$PGBIN") || rc=$?
(cd "$OUT/iso" && "$PGXS_DIR/test/isolation/pg_isolation_regress" --use-existing \
  --host="$COORD_SOCK" --port="$COORD_PORT" --user=postgres --dbname=postgres --inputdir=. \
  --outputdir=. --schedule="$IDEM_ROOT/test/citus/isolation_schedule" --bindir="$PGBIN") || rc=$?
for d in "$OUT/regress/regression.diffs" "$OUT/iso/regression.diffs"; do
  [[ -s $d ]] && { echo "=== $d"; cat "$d"; }
done
[[ $rc -eq 0 ]] || fail "pg_regress or pg_isolation_regress failed"
echo "Citus schedule and isolation specs passed"
