#!/usr/bin/env bash
# idem: same on every major (the generated copies of test/vectors; the IDEM_PG=15 run runs it, see .ci/run)
# The clients' files generated from the spec (scripts/gen_spec.py) are what the spec gives: a
# statement changed in test/vectors/statements.json without a run of the generator, or a
# generated file edited by hand, fails here. Also: the check itself sees a stale copy.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python3 "$root/scripts/gen_spec.py" --check
# The check must fail on a copy whose generated file differs (in a scratch copy of the tree).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/scripts" "$work/test/vectors"
cp "$root/scripts/gen_spec.py" "$work/scripts/"
cp "$root/test/vectors/statements.json" "$work/test/vectors/"
(cd "$work" && mkdir -p clients/go clients/java/src/main/java/io/github/pgidempotency/idempotency \
  clients/node/lib clients/python/pg_idempotency &&
  python3 scripts/gen_spec.py >/dev/null)
sed -i 's/idempotency.forget(/idempotency.forgot(/' "$work/clients/go/statements_gen.go"
if out=$(python3 "$work/scripts/gen_spec.py" --check 2>&1); then
  echo "FAIL: --check passed a hand-edited statements_gen.go: $out" >&2
  exit 1
fi
[[ $out == *"clients/go/statements_gen.go"* ]] || { echo "FAIL: --check did not name the file: $out" >&2; exit 1; }
echo "ok: the generated files are the spec's, and a stale one is named"
