#!/usr/bin/env bash
# The client installs of docs/clients-python.md and docs/clients-node.md, done as a user does
# them from a clean start (the `docs` suite):
#   install.sh python VENV     a venv on Debian's Python that sees Debian's psycopg, the package
#                              installed with pip --no-build-isolation; VENV stays for the
#                              docs' Python blocks
#   install.sh node            an empty `npm init -y` project, the package installed from its
#                              folder, used through import and, from CommonJS, through import()
# No registry: pip may not reach an index (PIP_NO_INDEX), npm runs offline (a link only).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

case $1 in
  python)
    venv=$2
    rm -rf "$venv"
    # Debian 12 refuses `pip install` into the system Python (PEP 668): check that the docs'
    # reason still holds, then do what they say instead.
    if PIP_NO_INDEX=1 /usr/bin/python3 -m pip install --dry-run --no-build-isolation \
      "$ROOT/clients/python" >/dev/null 2>&1; then
      echo "pip installs into the system Python: docs/clients-python.md is out of date" >&2
      exit 1
    fi
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    PIP_NO_INDEX=1 "$venv/bin/pip" install --quiet --no-build-isolation "$ROOT/clients/python"
    (cd / && "$venv/bin/python" -c '
import pg_idempotency, psycopg
print("python:", pg_idempotency.request_hash({"amount": 100}).hex()[:16],
      "psycopg", psycopg.__version__)')
    ;;
  node)
    work=$(mktemp -d "${TMPDIR:-/tmp}/idem-npm-app.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    # npm installs a folder as a link and reifies the folder's own dependencies in it, which
    # would prune the dev dependencies of clients/node: install a copy of the package's files.
    mkdir "$work/client" "$work/app"
    (cd "$ROOT/clients/node" &&
      cp -r package.json index.js index.d.ts lib README.md "$work/client/")
    cd "$work/app"
    npm init -y >/dev/null
    npm install --offline --no-audit --no-fund "$work/client" >/dev/null
    test -L node_modules/@idempotency/client
    cat >esm.mjs <<'EOF'
import { fingerprint } from '@idempotency/client';
console.log('import:', fingerprint({ amount: 100 }).toString('hex').slice(0, 16));
EOF
    cat >cjs.js <<'EOF'
// package.json of `npm init -y` says "type": "commonjs": require() of an ES module needs
// Node >= 22; import() works everywhere.
import('@idempotency/client').then(({ fingerprint }) => {
  console.log('import():', fingerprint({ amount: 100 }).toString('hex').slice(0, 16));
});
EOF
    a=$(node esm.mjs)
    b=$(node cjs.js)
    echo "$a"
    echo "$b"
    [[ ${a#*: } == "${b#*: }" && -n ${a#*: } ]]
    ;;
  *)
    echo "usage: install.sh python VENV | node" >&2
    exit 2
    ;;
esac
