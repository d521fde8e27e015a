#!/usr/bin/env bash
# Assembles the managed edition's install script, idempotency--<version>.sql (the version is
# idempotency.control's default_version: the edition moves in step with the extension), from
# its sources in src/, one file a concern, in the order their objects depend on each other.
# The assembled script is committed, so that an install needs a checkout and psql only.
#   bash editions/managed/build.sh          writes editions/managed/idempotency--<version>.sql
#   bash editions/managed/build.sh --check  exit 1 when the committed script differs from
#                                           what the sources assemble (the managed suite runs it)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VERSION=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" "$HERE/../../idempotency.control")
SOURCES="base fingerprint keys execute_once streams views maintenance"
TARGET=$HERE/idempotency--$VERSION.sql

assemble() {
  local first=1 s
  echo "-- Assembled by editions/managed/build.sh from editions/managed/src/*.sql: edit those."
  for s in $SOURCES; do
    [[ $first == 1 ]] || echo
    first=0
    echo "-- ---- src/$s.sql"
    sed "s/@VERSION@/$VERSION/g" "$HERE/src/$s.sql"
  done
}

unlisted=$(cd "$HERE/src" && for f in *.sql; do [[ " $SOURCES " == *" ${f%.sql} "* ]] || echo "$f"; done)
if [[ -n $unlisted ]]; then
  echo "build.sh: src/ holds files the build does not list: $unlisted" >&2
  exit 1
fi
if [[ ${1:-} == --check ]]; then
  if ! cmp -s <(assemble) "$TARGET"; then
    echo "build.sh: ${TARGET#"$HERE"/} is not what src/ assembles; run bash editions/managed/build.sh" >&2
    diff -u "$TARGET" <(assemble) | head -n 20 >&2 || true
    exit 1
  fi
  echo "build.sh: ${TARGET#"$HERE"/} is up to date"
  exit 0
fi
assemble >"$TARGET.tmp"
mv "$TARGET.tmp" "$TARGET"
echo "build.sh: wrote ${TARGET#"$HERE"/}"
