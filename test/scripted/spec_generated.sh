#!/usr/bin/env bash
# idem: same on every major (the generated copies of test/vectors; the IDEM_PG=15 run runs it, see .ci/run)
# The clients' files generated from the spec (scripts/gen_spec.py) are what the spec gives: a
# statement, SQLSTATE, default or HTTP answer changed in test/vectors (statements.json,
# client.json, http_answers.json) without a run of the generator, or a generated file edited
# by hand, fails here. Also: the check itself sees a stale copy.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python3 "$root/scripts/gen_spec.py" --check
# The check must fail on a copy whose generated file differs (in a scratch copy of the tree).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/scripts" "$work/test/vectors"
cp "$root/scripts/gen_spec.py" "$work/scripts/"
cp "$root"/test/vectors/{statements,client,http_answers}.json "$work/test/vectors/"
(cd "$work" && mkdir -p clients/go clients/java/src/main/java/io/github/pgidempotency/idempotency \
  clients/node/lib clients/python/pg_idempotency &&
  python3 scripts/gen_spec.py >/dev/null)
stale() { # FILE: --check must fail naming FILE, then the file is generated again
  if out=$(python3 "$work/scripts/gen_spec.py" --check 2>&1); then
    echo "FAIL: --check passed a stale $1: $out" >&2
    exit 1
  fi
  [[ $out == *"$1"* ]] || { echo "FAIL: --check did not name $1: $out" >&2; exit 1; }
  python3 "$work/scripts/gen_spec.py" >/dev/null
}
sed -i 's/idempotency.forget(/idempotency.forgot(/' "$work/clients/go/statements_gen.go"
stale clients/go/statements_gen.go
# a title changed in http_answers.json, a default in client.json, without a run of the generator
sed -i 's/"Idempotency-Key is too old"/"Idempotency-Key is stale"/g' "$work/test/vectors/http_answers.json"
stale clients/python/pg_idempotency/spec.py
sed -i 's/"24 hours"/"25 hours"/' "$work/test/vectors/client.json"
stale clients/node/lib/spec.js
sed -i 's/String STALE_ATTEMPT = "IK001"/String STALE_ATTEMPT = "IK009"/' \
  "$work/clients/java/src/main/java/io/github/pgidempotency/idempotency/SqlStates.java"
stale clients/java/src/main/java/io/github/pgidempotency/idempotency/SqlStates.java
echo "ok: the generated files are the spec's, and a stale one is named"
