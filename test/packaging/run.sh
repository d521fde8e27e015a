#!/usr/bin/env bash
# The packaging suite (scripts/test.sh, IDEM_SUITES=packaging; once, in the IDEM_PG=15 run):
# the packages users install, built by scripts/release.sh and used as a user does:
#  - release.sh's version check refuses a tree with one mismatched marker, naming the file;
#  - release.sh builds the .deb (its build runs the regression suite against the package), the
#    PGXN zip, the wheel, the sdist and the npm tarball, with SHA-256 sums;
#  - lintian: no error, and each warning kept is listed with its reason in
#    docs/development.md ("Packages");
#  - with the checkout's own `make install` removed: the .deb installed by README's command, a
#    cluster that loads only the package's files, CREATE EXTENSION, the regression suite, the
#    Python client (from the wheel), the Node client (from the tarball) and a Go sample on the
#    release's Go modules and a Maven sample on the release's jar (each a burst of one key,
#    one order) against it, ALTER
#    EXTENSION UPDATE of a database made at 0.2.0 by the packaged scripts; the package's
#    autopkgtest (debian/tests) as Debian runs it, `autopkgtest … -- null` against the .deb;
#    apt-get remove --purge leaves none of the package's files;
#  - README's PGXN commands: make dist, then pgxnclient installs the zip (pgxn install
#    ./idempotency-*.zip) and the extension creates; then it is uninstalled again;
#  - the wheel and the sdist install into fresh venvs and import; the npm tarball installs into
#    an empty project and both entry points import;
#  - at the end the checkout's own build is installed again by README's "From source" commands,
#    as before the suite.
# README's install section ("Installing into your own server") is run as written: each command
# of its three blocks is run here (sudo dropped, apt answering yes), but dpkg-buildpackage,
# which release.sh runs on an export of the tree.
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

# go_sample DIST DIR: the sample of test/packaging/go-sample in DIR, outside the repository's
# modules, on the Go modules of DIST/goproxy (unpacked, through replace directives) and pgx v4
# from Debian's sources (scripts/go_vendor.py), built in module mode with no proxy; then run
# against the PG* server.
go_sample() {
  local dist=$1 app=$2 v=v$VERSION m=github.com/pgidempotency/idempotency/clients/go
  rm -rf "$app" && mkdir -p "$app/modules" && cp test/packaging/go-sample/main.go "$app/" &&
    (cd "$app/modules" && unzip -q "$dist/goproxy/$m/@v/$v.zip" && unzip -q "$dist/goproxy/$m/pgxv4/@v/$v.zip") &&
    sed "s#@MODULES@#$app/modules#g; s#@VERSION@#$v#g" test/packaging/go-sample/go.mod.in >"$app/go.mod" &&
    install_missing $GO_PACKAGES &&
    /usr/bin/python3 scripts/go_vendor.py "$app" &&
    (cd "$app" && GO111MODULE=on GOFLAGS=-mod=vendor GOPROXY=off GOCACHE=$IDEM_ROOT/build/go-cache \
      go build -o go-sample . && ./go-sample)
}

# java_sample DIST DIR: the release's jar and pom installed by Maven into a local repository
# of DIR's own (mvn install:install-file), then the sample of test/packaging/java-sample, a
# project that depends on the client by its coordinates, built and tested from there (mvn
# test: a burst of one key against its service makes one order, against the PG* server).
# Offline: every other artifact comes from Debian's Maven repository.
java_sample() {
  local dist=$1 app=$2
  local mvn=(mvn -B -s "$IDEM_ROOT/clients/java/maven-settings.xml" -Dmaven.repo.local="$app/m2")
  rm -rf "$app" && mkdir -p "$app" && cp -r test/packaging/java-sample/. "$app/" &&
    install_missing $JAVA_PACKAGES &&
    mkdir "$app/install" && # a folder with no pom.xml: the install reads the release's pom
    (cd "$app/install" && "${mvn[@]}" -q org.apache.maven.plugins:maven-install-plugin:3.1.0:install-file \
      -Dfile="$dist/idempotency-client-$VERSION.jar" -DpomFile="$dist/idempotency-client-$VERSION.pom") &&
    [[ -f $app/m2/io/github/pgidempotency/idempotency-client/$VERSION/idempotency-client-$VERSION.jar ]] &&
    (cd "$app" && "${mvn[@]}" -Didempotency.version="$VERSION" test)
}

mkdir -p "$LOGS"
LOG=$LOGS/packaging-steps.log
: >"$LOG"
rm -rf "$WORK"
mkdir -p "$WORK"
VERSION=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" idempotency.control)
MAJOR=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
PKG=postgresql-$MAJOR-idempotency

# (release.sh builds the jar with Maven; the samples build with Go and Maven)
check "the packaging tools are installed (postgresql-server-dev-all, debhelper, lintian, pgxnclient, python3-build, autopkgtest, Go, Maven)" \
  install_missing $PACKAGING_PACKAGES $GO_PACKAGES $JAVA_PACKAGES || finish

# --- README's install section, run as written ----------------------------------------------
# readme_block N: the commands of the Nth sh block of README's "Installing into your own
# server" (1: the Debian package, 2: PGXN, 3: from source), a leading sudo and comments
# dropped, one a line.
readme_block() {
  awk -v n="$1" '
    /^## / { section = ($0 == "## Installing into your own server"); next }
    section && /^```sh$/ { block++; inside = (block == n); next }
    section && /^```$/ { inside = 0; next }
    inside {
      sub(/[ \t]+#.*$/, ""); sub(/^sudo /, ""); gsub(/ && sudo /, " \\&\\& "); print
    }' "$IDEM_ROOT/README.md"
}
# readme_line N K: the Kth command of block N.
readme_line() { readme_block "$1" | sed -n "${2}p"; }
# readme_run DIR COMMAND: one of README's commands, run in DIR as root (the block's sudo), apt
# answering yes as a person at the terminal would, make with -j2.
printf 'APT::Get::Assume-Yes "true";\nDPkg::Lock::Timeout "600";\n' >"$WORK/apt.conf"
readme_run() {
  echo "README: (cd $1 && $2)"
  (cd "$1" && as_root env APT_CONFIG="$WORK/apt.conf" DEBIAN_FRONTEND=noninteractive \
    MAKEFLAGS=-j2 bash -c "$2")
}
readme_shape() {
  local want=(3 3 2) n k
  for n in 1 2 3; do
    k=$(readme_block "$n" | grep -c .)
    [[ $k == "${want[n - 1]}" ]] || { echo "README's install block $n has $k commands, not ${want[n - 1]}:"; readme_block "$n"; return 1; }
  done
  readme_block 1 | sed -n 2p | grep -qx 'dpkg-buildpackage -us -uc -b' &&
    grep -qF '&& dpkg-buildpackage -us -uc -b)' scripts/release.sh ||
    { echo "README's dpkg-buildpackage line is not release.sh's"; return 1; }
}
check "README's install section: three blocks, whose dpkg-buildpackage is release.sh's" readme_shape || finish
# The Debian block's first command (the package's Build-Depends) in the checkout, and the PGXN
# and source blocks' package installs.
# (It installs postgresql-all, the servers the package build tests against: under
# IDEM_PG15_LOCK, as it changes the system's PostgreSQL.)
with_pg15_lock() {
  if [[ -z ${IDEM_PG15_LOCK:-} ]]; then "$@"; else (flock 7 && "$@") 7>"$IDEM_PG15_LOCK"; fi
}
check "README: $(readme_line 1 1) (in the checkout)" \
  with_pg15_lock readme_run "$IDEM_ROOT" "$(readme_line 1 1)" || finish
check "README: $(readme_line 2 1)" readme_run "$IDEM_ROOT" "$(readme_line 2 1)"
check "README: $(readme_line 3 1)" readme_run "$IDEM_ROOT" "$(readme_line 3 1)"

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
  timed_step "release.sh (dpkg-buildpackage with its regression run, the zip, the wheel, the sdist, npm pack)" release || finish
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
# The checkout's own build installed again: README's "From source" make line when `pg_config`
# is this server's (else, and should that fail, the test command's own build and install).
restore() {
  if [[ $(pg_config --bindir 2>/dev/null) == "$PGBIN" ]] &&
    check "README: $(readme_line 3 2) (the checkout's own build installed again)" \
      readme_run "$IDEM_ROOT" "$(readme_line 3 2)"; then
    return 0
  fi
  check "the checkout's own build is installed again" build_and_install
}

uninstall_checkout() {
  as_root make -C "$IDEM_ROOT" uninstall PG_CONFIG="$PG_CONFIG" || return 1
  [[ -z $(ours) ]] || { echo "left after make uninstall:"; ours; return 1; }
}
check "the checkout's make install removed: no idempotency file in $LIBDIR or $SHAREDIR" \
  uninstall_checkout || { restore; finish; }

# README's apt-get install ../PKG_*.deb, from a folder beside the .deb as a clone is beside
# dpkg-buildpackage's output: then every file of the extension in the server's folders is the
# package's (dpkg -S names it).
install_deb() {
  mkdir -p "$DIST/clone" && readme_run "$DIST/clone" "$(readme_line 1 3)" || return 1
  local f
  for f in $(ours); do
    dpkg -S "$f" | grep -q "^$PKG: " || { echo "$f is not the package's"; return 1; }
  done
  [[ -f $LIBDIR/idempotency.so && -f $SHAREDIR/idempotency--0.1.0.sql ]]
}
cluster_setup test-cluster/packaging 54498
PKG_DATA=$CLUSTER_DATA PKG_PORT=$CLUSTER_PORT PKG_SOCK=$CLUSTER_SOCK
pq() { cluster_psql "$PKG_DATA" "$PKG_PORT" "$PKG_SOCK" -qAt "$@"; }
if check "README: $(readme_line 1 3) (the .deb release.sh built): the extension's files are the package's" install_deb; then
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
    go_smoke() {
      PGHOST=$PKG_SOCK PGPORT=$PKG_PORT PGUSER=postgres PGDATABASE=postgres go_sample "$DIST" "$WORK/go-sample"
    }
    check "the Go modules (release.sh's module zips) in a sample project, module mode, offline: a burst of one key makes one order" go_smoke
    java_smoke() {
      PGHOST=$PKG_SOCK PGPORT=$PKG_PORT PGUSER=postgres PGDATABASE=postgres java_sample "$DIST" "$WORK/java-sample"
    }
    check "the Java client (release.sh's jar and pom, mvn install into a local repository) in a sample Maven project: a burst of one key makes one order" java_smoke
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
  # The package's autopkgtest (debian/tests/control: installcheck), the way Debian's CI runs
  # it, on this machine (the null virtualisation server): autopkgtest installs the test's
  # Depends and the .deb given, then runs debian/tests/installcheck as root in a copy of the
  # source tree. Exit 0: every test passed (2 would be a skipped test, 4 a failed one).
  autopkgtest_null() {
    local src=$WORK/autopkgtest-src out=$WORK/autopkgtest-out
    rm -rf "$src" "$out" && mkdir -p "$src" &&
      (git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$src" -xf - &&
      as_root autopkgtest --output-dir "$out" "$DEB" "$src" -- null || return 1
    grep -E '^installcheck +PASS' "$out/summary"
  }
  check "autopkgtest (debian/tests: installcheck) against the .deb, null virtualisation server" \
    timed_step "autopkgtest of the .deb (null virtualisation server)" autopkgtest_null
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

# --- PGXN: README's make dist, then Debian's pgxnclient installs the zip ----------------------
# In the checkout, as README says; `pg_config` on the PATH must be this server's (on another
# machine, pgxn's --pg_config names it).
pgxn_install() {
  local pgxn_opts=""
  [[ $(pg_config --bindir 2>/dev/null) == "$PGBIN" ]] || pgxn_opts=" --pg_config $PG_CONFIG"
  rm -f "$IDEM_ROOT"/idempotency-*.zip
  readme_run "$IDEM_ROOT" "$(readme_line 2 2)" || return 1
  [[ -f $IDEM_ROOT/idempotency-$VERSION.zip ]] || { echo "make dist wrote no idempotency-$VERSION.zip"; return 1; }
  readme_run "$IDEM_ROOT" "$(readme_line 2 3 | sed "s| install | install$pgxn_opts |")" || return 1
  [[ -f $LIBDIR/idempotency.so && -f $SHAREDIR/idempotency.control ]] || return 1
  cluster_init "$PKG_DATA" "$PKG_PORT" "$PKG_SOCK" "fsync = off" && cluster_start "$PKG_DATA" || return 1
  local rc=0
  pq -d postgres -c 'CREATE EXTENSION idempotency' &&
    [[ $(pq -d postgres -c "SELECT outcome FROM idempotency.reserve('s', 'k', NULL)") == new ]] || rc=1
  cluster_stop "$PKG_DATA" >/dev/null 2>&1 || true
  (cd "$IDEM_ROOT" && as_root pgxn uninstall --pg_config "$PG_CONFIG" "./idempotency-$VERSION.zip") || rc=1
  rm -f "$IDEM_ROOT/idempotency-$VERSION.zip"
  [[ -z $(ours) ]] || { echo "left after pgxn uninstall:"; ours; rc=1; }
  return $rc
}
check "README: $(readme_line 2 2); $(readme_line 2 3) (Debian's pgxnclient): the extension creates; pgxn uninstall removes it" pgxn_install
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
