#!/usr/bin/env bash
# The packaging suite (scripts/test.sh, IDEM_SUITES=packaging; once, in the IDEM_PG=15 run):
# the packages users install, built by scripts/release.sh and used as a user does:
#  - release.sh's version check refuses a tree with one mismatched marker, naming the file;
#  - release.sh builds the .deb (its build runs the regression suite against the package), the
#    PGXN zip, the wheel, the sdist and the npm tarball, with SHA-256 sums;
#  - lintian: no error, and each warning kept is listed with its reason in
#    docs/development.md ("Packages");
#  - with the checkout's own `make install` removed: apt-get install ./…deb, a cluster that
#    loads only the package's files, CREATE EXTENSION, the regression suite, the Python client
#    (from the wheel) and the Node client (from the tarball) against it, ALTER EXTENSION
#    UPDATE of a database made at 0.2.0 by the packaged scripts; apt-get remove --purge leaves
#    none of the package's files;
#  - pgxnclient installs the zip (pgxn install ./idempotency-<version>.zip) and the extension
#    creates; then it is uninstalled again;
#  - the wheel and the sdist install into fresh venvs and import; the npm tarball installs into
#    an empty project and both entry points import;
#  - at the end the checkout's own build is installed again, as before the suite.
# Prints "ok …" / "FAILED …" per check and ends with "packaging: N passed, M failed".
# IDEM_PG15_LOCK=FILE: hold flock on FILE while the system's PostgreSQL is changed (a machine
# shared by several checkouts).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cd "$IDEM_ROOT" || exit 1
LOGS=${LOGS:-$IDEM_ROOT/build/test-logs}
WORK=$IDEM_ROOT/build/packaging
DIST=$WORK/dist
PASSED=0
FAILED=0
ok() { PASSED=$((PASSED + 1)); echo "ok     $*"; }
failed() { FAILED=$((FAILED + 1)); echo "FAILED $*"; }
# check WHAT COMMAND...: one pass or failure; the command's output goes to the log.
check() {
  local what=$1
  shift
  echo "=== $what" >>"$LOG"
  if "$@" >>"$LOG" 2>&1 </dev/null; then ok "$what"; else failed "$what (log ${LOG#"$IDEM_ROOT"/})"; return 1; fi
}
finish() {
  echo "packaging: $PASSED passed, $FAILED failed"
  exit 0
}

mkdir -p "$LOGS"
LOG=$LOGS/packaging-steps.log
: >"$LOG"
rm -rf "$WORK"
mkdir -p "$WORK"
VERSION=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" idempotency.control)
MAJOR=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
PKG=postgresql-$MAJOR-idempotency

check "the packaging tools are installed (postgresql-server-dev-all, debhelper, lintian, pgxnclient, python3-build)" \
  install_missing postgresql-server-dev-all debhelper lintian pgxnclient python3-build \
  python3-venv python3-setuptools python3-wheel unzip || finish

# --- release.sh's check, on a copy of the tree with one marker changed ------------------------
mismatch() {
  local copy=$WORK/mismatched out
  mkdir -p "$copy"
  git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -C "$copy" -xf -
  bash "$copy/scripts/release.sh" --check || return 1 # the copy itself agrees
  sed -i 's/"version": "[^"]*"/"version": "9.9.9"/' "$copy/clients/node/package.json"
  if out=$(bash "$copy/scripts/release.sh" --check 2>&1); then
    echo "release.sh --check passed a tree whose package.json says 9.9.9"
    return 1
  fi
  echo "$out"
  grep -q "clients/node/package.json: version is '9.9.9', not $VERSION" <<<"$out"
}
check "release.sh --check refuses a tree with one mismatched version, naming the file" mismatch

# --- the artifacts -----------------------------------------------------------------------------
# The package build's regression run listens on a port of the test command's block.
release() {
  PGPORT=$((54497 + ${IDEM_PORT_OFFSET:-0})) IDEM_RELEASE_LOGS=$LOGS \
    bash scripts/release.sh --out "$DIST" || return 1
  (cd "$DIST" && sha256sum -c SHA256SUMS) || return 1
  local f
  for f in "${PKG}_$VERSION-"*.deb "idempotency-$VERSION.zip" "pg_idempotency-$VERSION-py3-none-any.whl" \
    "pg[-_]idempotency-$VERSION.tar.gz" "idempotency-client-$VERSION.tgz"; do
    compgen -G "$DIST/$f" >/dev/null || { echo "release.sh wrote no $f"; return 1; }
  done
}
check "release.sh: the .deb (its build ran the regression suite against the package), the zip, the wheel, the sdist, the npm tarball, SHA256SUMS" \
  release || finish
DEB=$(ls "$DIST/${PKG}_$VERSION"-*.deb)

# --- lintian -----------------------------------------------------------------------------------
lint() {
  local out tag kept bad=0
  out=$(lintian --fail-on error "$DEB" 2>&1) || { echo "$out"; return 1; }
  echo "$out"
  # The warnings kept, each with its reason in docs/development.md ("- `tag`: reason").
  kept=$(sed -n '/^### Lintian warnings kept/,/^#/p' docs/development.md)
  for tag in $(sed -nE 's/^W: [^ ]+: ([a-z0-9-]+).*/\1/p' <<<"$out" | sort -u); do
    grep -q -- "- \`$tag\`: " <<<"$kept" || { echo "warning $tag is not listed in docs/development.md"; bad=1; }
  done
  return $bad
}
check "lintian: no error; each warning kept is listed with its reason in docs/development.md" lint

# --- the system's PostgreSQL: the package instead of the checkout's install ---------------------
if [[ -n ${IDEM_PG15_LOCK:-} ]]; then
  exec 9>"$IDEM_PG15_LOCK"
  log "waiting for $IDEM_PG15_LOCK"
  flock 9
fi
SHAREDIR=$("$PG_CONFIG" --sharedir)/extension
LIBDIR=$("$PG_CONFIG" --pkglibdir)
ours() { ls "$LIBDIR"/idempotency.so "$SHAREDIR"/idempotency.control "$SHAREDIR"/idempotency--*.sql 2>/dev/null; }
restore() {
  check "the checkout's own build is installed again" build_and_install
}

uninstall_checkout() {
  as_root make -C "$IDEM_ROOT" uninstall PG_CONFIG="$PG_CONFIG" || return 1
  [[ -z $(ours) ]] || { echo "left after make uninstall:"; ours; return 1; }
}
check "the checkout's make install removed: no idempotency file in $LIBDIR or $SHAREDIR" \
  uninstall_checkout || { restore; finish; }

# apt-get install ./PKG.deb: then every file of the extension in the server's folders is the
# package's (dpkg -S names it).
install_deb() {
  apt_install "$DEB" || return 1
  local f
  for f in $(ours); do
    dpkg -S "$f" | grep -q "^$PKG: " || { echo "$f is not the package's"; return 1; }
  done
  [[ -f $LIBDIR/idempotency.so && -f $SHAREDIR/idempotency--0.1.0.sql ]]
}
cluster_setup test-cluster/packaging 54498
PKG_DATA=$CLUSTER_DATA PKG_PORT=$CLUSTER_PORT PKG_SOCK=$CLUSTER_SOCK
pq() { cluster_psql "$PKG_DATA" "$PKG_PORT" "$PKG_SOCK" -qAt "$@"; }
if check "apt-get install ./$(basename "$DEB"): the extension's files are the package's" install_deb; then
  dpkg -L "$PKG" | sort >"$WORK/package-files"
  if check "a cluster preloading the packaged library starts" \
    eval 'cluster_init "$PKG_DATA" "$PKG_PORT" "$PKG_SOCK" "fsync = off" && cluster_start "$PKG_DATA"'; then
    created() {
      pq -d postgres -c 'CREATE EXTENSION idempotency' &&
        [[ $(pq -d postgres -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") == "$VERSION" ]] &&
        [[ $(pq -d postgres -c "SELECT setting FROM pg_settings WHERE name = 'shared_preload_libraries'") == *idempotency* ]] &&
        # the library the server loaded is the package's
        grep -q "$LIBDIR/idempotency.so" "/proc/$(head -n1 "$PKG_DATA/postmaster.pid")/maps"
    }
    check "CREATE EXTENSION idempotency ($VERSION) from the package; the server maps the packaged library" created
    regress() {
      PGHOST=$PKG_SOCK PGPORT=$PKG_PORT PGUSER=postgres make -C "$IDEM_ROOT" installcheck \
        PG_CONFIG="$PG_CONFIG" ISOLATION= TAP_TESTS= || { cat "$IDEM_ROOT/regression.diffs" 2>/dev/null; return 1; }
    }
    check "the regression suite against the package" regress
    py_smoke() {
      local venv=$WORK/venv-smoke
      /usr/bin/python3 -m venv --system-site-packages "$venv" &&
        PIP_NO_INDEX=1 "$venv/bin/pip" install --quiet --no-deps "$DIST/pg_idempotency-$VERSION-py3-none-any.whl" &&
        PGHOST=$PKG_SOCK PGPORT=$PKG_PORT PGUSER=postgres PGDATABASE=postgres \
          "$venv/bin/python" test/packaging/smoke.py
    }
    check "the Python client (the wheel) against the package: check_extension, run_once, replay" py_smoke
    node_smoke() {
      local app=$WORK/node-smoke
      mkdir -p "$app" && cp test/packaging/smoke.mjs "$app/" &&
        (cd "$app" && npm init -y >/dev/null && npm install --offline --no-audit --no-fund \
          --legacy-peer-deps "$DIST/idempotency-client-$VERSION.tgz" >/dev/null) &&
        scripts/npm_ci.sh "$IDEM_ROOT/clients/node" >/dev/null &&
        (cd "$app" && PGHOST=$PKG_SOCK PGPORT=$PKG_PORT PGUSER=postgres PGDATABASE=postgres \
          IDEM_PG_MODULE=$IDEM_ROOT/clients/node/node_modules/pg/lib/index.js node smoke.mjs)
    }
    check "the Node client (the npm tarball) against the package: checkExtension, runOnce, replay" node_smoke
    update() {
      pq -d postgres -c 'CREATE DATABASE from_020' &&
        pq -d from_020 -c "CREATE EXTENSION idempotency VERSION '0.2.0'" &&
        [[ $(pq -d from_020 -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") == 0.2.0 ]] &&
        pq -d from_020 -c 'ALTER EXTENSION idempotency UPDATE' &&
        [[ $(pq -d from_020 -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") == "$VERSION" ]] &&
        [[ $(pq -d from_020 -c "SELECT outcome FROM idempotency.reserve('s', 'k', NULL)") == new ]]
    }
    check "ALTER EXTENSION idempotency UPDATE takes a database made at 0.2.0 to $VERSION" update
  fi
  cluster_stop "$PKG_DATA" >/dev/null 2>&1 || true
  purge() {
    as_root env DEBIAN_FRONTEND=noninteractive apt-get remove --purge -y "$PKG" || return 1
    local f left=0
    ! dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null | grep -q 'install ok installed' || { echo "$PKG still installed"; return 1; }
    while read -r f; do
      [[ -d $f ]] && continue # folders the package shares with others (/usr, …)
      if [[ -e $f || -L $f ]]; then echo "left: $f"; left=1; fi
    done <"$WORK/package-files"
    [[ -z $(ours) && -z $(ls -d /usr/share/doc/"$PKG" 2>/dev/null) ]] || { echo "left:"; ours; left=1; }
    return $left
  }
  check "apt-get remove --purge $PKG leaves none of its files" purge
fi

# --- PGXN: Debian's pgxnclient installs the zip ---------------------------------------------
pgxn_install() {
  (cd "$DIST" && as_root pgxn install --pg_config "$PG_CONFIG" "./idempotency-$VERSION.zip") || return 1
  [[ -f $LIBDIR/idempotency.so && -f $SHAREDIR/idempotency.control ]] || return 1
  cluster_init "$PKG_DATA" "$PKG_PORT" "$PKG_SOCK" "fsync = off" && cluster_start "$PKG_DATA" || return 1
  local rc=0
  pq -d postgres -c 'CREATE EXTENSION idempotency' &&
    [[ $(pq -d postgres -c "SELECT outcome FROM idempotency.reserve('s', 'k', NULL)") == new ]] || rc=1
  cluster_stop "$PKG_DATA" >/dev/null 2>&1 || true
  (cd "$DIST" && as_root pgxn uninstall --pg_config "$PG_CONFIG" "./idempotency-$VERSION.zip") || rc=1
  [[ -z $(ours) ]] || { echo "left after pgxn uninstall:"; ours; rc=1; }
  return $rc
}
check "pgxn install ./idempotency-$VERSION.zip (Debian's pgxnclient): the extension creates; pgxn uninstall removes it" pgxn_install
restore
[[ -z ${IDEM_PG15_LOCK:-} ]] || exec 9>&-

# --- the client packages on their own ------------------------------------------------------------
wheel_and_sdist() {
  local what venv
  for what in "pg_idempotency-$VERSION-py3-none-any.whl" "pg[-_]idempotency-$VERSION.tar.gz"; do
    venv=$WORK/venv-${what##*.}
    /usr/bin/python3 -m venv --system-site-packages "$venv" &&
      PIP_NO_INDEX=1 "$venv/bin/pip" install --quiet --no-deps --no-build-isolation "$DIST"/$what &&
      (cd / && "$venv/bin/python" -c "
import pg_idempotency, sys
assert pg_idempotency.__version__ == '$VERSION', pg_idempotency.__version__
assert pg_idempotency.__file__.startswith('$venv'), pg_idempotency.__file__
print('$what:', pg_idempotency.__version__, pg_idempotency.EXTENSION_VERSIONS)") || return 1
  done
}
check "the wheel and the sdist install into fresh venvs and import" wheel_and_sdist
npm_tarball() {
  local app=$WORK/npm-app
  rm -rf "$app" && mkdir -p "$app" && cd "$app" && npm init -y >/dev/null &&
    npm install --offline --no-audit --no-fund --legacy-peer-deps \
      "$DIST/idempotency-client-$VERSION.tgz" >/dev/null &&
    [[ ! -L node_modules/@idempotency/client ]] &&
    node --input-type=module -e "
import { CLIENT_VERSION, fingerprint } from '@idempotency/client';
import { uuidv7 } from '@idempotency/client/action';
if (CLIENT_VERSION !== '$VERSION') throw new Error('version ' + CLIENT_VERSION);
console.log('index:', fingerprint({ a: 1 }).toString('hex').slice(0, 16), 'action:', uuidv7());"
}
check "the npm tarball installs into an empty project; both entry points import" npm_tarball
finish
