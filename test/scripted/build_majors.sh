#!/usr/bin/env bash
# idem: same on every major (the IDEM_PG=15 run runs it; see scripts/test.sh)
# The build and the test command refuse what they cannot do, before doing anything: a
# PG_CONFIG of an unsupported major stops make with the supported majors named; IDEM_PG=16
# (no Debian source package) and IDEM_PG=14 stop the test command at once; a source package
# that cannot be downloaded is named with its suite, and a pinned tarball stands in for one the
# suite's index names but the mirror cannot give. A built major is reused: a second
# build_pg_major does nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" none
WORK=$(mktemp -d /tmp/build-majors.XXXXXX)

for version in "14.12" "19devel"; do
  printf '#!/bin/sh\necho "PostgreSQL %s"\n' "$version" >"$WORK/pg_config"
  chmod +x "$WORK/pg_config"
  out=$(make -s --no-print-directory -C "$IDEM_ROOT" PG_CONFIG="$WORK/pg_config" 2>&1) && fail "make accepted PostgreSQL $version"
  [[ $out == *"is PostgreSQL ${version%%[.d]*}; idempotency supports PostgreSQL 15 16 17 18"* ]] ||
    fail "make's refusal of $version: $out"
  echo "ok: make refuses PostgreSQL $version: ${out##*\*\*\* }"
done

for major in 16 14; do
  start=$SECONDS
  out=$(IDEM_PG=$major IDEM_SUITES=unit bash "$IDEM_ROOT/scripts/test.sh" 2>&1) &&
    fail "IDEM_PG=$major was accepted"
  [[ $(wc -l <<<"$out") == 1 && $out == "error: IDEM_PG=$major"* && $out == *"supported: 15 17 18"* ]] ||
    fail "IDEM_PG=$major: $out"
  [[ $major != 16 || $out == *"no postgresql-16 source package"* ]] || fail "IDEM_PG=16 does not say why: $out"
  echo "ok: IDEM_PG=$major stops at once ($((SECONDS - start)) s): $out"
done

out=$(fetch_source trixie idempotency-no-such-package "$WORK/src" 2>&1) && fail "a missing source package was fetched"
[[ $out == *"could not download source package idempotency-no-such-package from Debian suite trixie"* ]] ||
  fail "a failed download does not name its package and suite: $out"
echo "ok: a failed download names its package and suite"

# A suite whose index cannot give the tarball (a mirror whose index is ahead of its pool): the
# pinned tarball from the pool, checked against its SHA-256, and refused when that differs.
out=$(fetch_source idempotency-no-such-suite pgtap "$WORK/pgtap" 2>&1) ||
  fail "the pinned pgtap was not fetched: $out"
[[ $out == *"trying the pinned pgtap_1.3.3.orig.tar.gz"* && -f $WORK/pgtap/pgtap.control ]] ||
  fail "the pinned pgtap: $out"
echo "ok: the pinned tarball stands in for one the suite cannot give"
IDEM_SOURCE_PINS[pgtap]="pgtap_1.3.3.orig.tar.gz $(printf '0%.0s' {1..64})"
out=$(fetch_source idempotency-no-such-suite pgtap "$WORK/pgtap-bad" 2>&1) &&
  fail "a tarball whose SHA-256 differs from its pin was accepted"
[[ $out == *"could not download source package pgtap"* && ! -e $WORK/pgtap-bad ]] ||
  fail "a wrong pin: $out"
echo "ok: a tarball whose SHA-256 differs from its pin is refused"

# The cache: built (by this call, if no earlier run did), then reused without a word.
build_pg_major 18 >/dev/null 2>&1 || fail "PostgreSQL 18 did not build"
out=$(build_pg_major 18 2>&1)
[[ -z $out ]] || fail "a second build_pg_major 18 did work again: $out"
[[ $("$(pg_major_prefix 18)/bin/postgres" --version) == "postgres (PostgreSQL) 18."* ]] ||
  fail "the cached PostgreSQL 18 does not run"
echo "ok: a second build_pg_major 18 reuses $(pg_major_prefix 18)"
echo PASS
