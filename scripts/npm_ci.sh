#!/usr/bin/env bash
# npm_ci.sh DIR: installs DIR's node_modules from its package-lock.json with npm ci, unless
# node_modules was installed from this very lock file already (a stamp file records it), so a
# second run needs no registry.
set -euo pipefail
cd "$1"
stamp=node_modules/.installed-from-lock
lock_sum=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$lock_sum" ]]; then
  echo "==> $1: node_modules matches package-lock.json"
  exit 0
fi
echo "==> $1: npm ci"
if npm ci --no-audit --no-fund --prefer-offline; then
  echo "$lock_sum" >"$stamp"
  # Its time, for the test command's summary (see note_step in scripts/lib.sh).
  [[ -z ${IDEM_STEP_TIMES:-} ]] ||
    printf '%s\tnpm ci %s\n' "$SECONDS" "${1#"${IDEM_ROOT:-}"/}" >>"$IDEM_STEP_TIMES" || true
else
  echo "npm ci failed in $1" >&2
  exit 1
fi
