# shellcheck shell=bash
# PostgreSQL majors other than Debian 12's own 15, built from Debian's source packages into a
# cache folder, with the extensions the test suites need (pg_partman 5.x, pgTAP).
# Sourced by scripts/lib.sh; IDEM_PG picks the major:
#   IDEM_PG=18 bash scripts/test.sh
# The first run downloads and builds (about four minutes per major with -j2); later runs reuse
# $IDEM_CACHE/pgMAJOR. Sources come through a private deb-src list on the mirror this machine's
# apt already uses: nothing is added to the machine's own apt configuration.

# Debian suite and source package of each major this project supports.
declare -A IDEM_PG_SOURCE=([17]="trixie postgresql-17" [18]="sid postgresql-18")
# Source packages built for every such major from the same cache: pg_partman 5.x and pgTAP
# (Debian 12 packages them for 15 only).
IDEM_EXTENSION_SOURCES=("trixie pg-partman" "trixie pgtap")
# Upstream tarballs known to build and pass, with the SHA-256 the archive listed for them: used
# when the suite's newest one cannot be downloaded (a mirror whose index is ahead of its pool:
# trixie listed postgresql-17 17.12 while the mirror served only 17.11's files).
declare -A IDEM_SOURCE_PINS=(
  [postgresql-17]="postgresql-17_17.11.orig.tar.bz2 \
    dd27f2b3c59e73ed14aa3324901242bf69a032a6347805f274e6260322d42979"
  [postgresql-18]="postgresql-18_18.6.orig.tar.bz2 \
    555610c24d53e4316da5b7d3fc25c279d96856d5e0e23ee308c328c5fa881d9f"
  [pg-partman]="pg-partman_5.2.4.orig.tar.gz \
    462464d83389ef20256b982960646a1572341c0beb09eeff32b4a69f04e31b76"
  [pgtap]="pgtap_1.3.3.orig.tar.gz \
    325ea79d0d2515bce96bce43f6823dcd3effbd6c54cb2a4d6c2384fffa3a14c7"
)
IDEM_SUPPORTED_MAJORS="15 17 18"
# Build dependencies of PostgreSQL itself (release tarballs carry no generated parsers since 17).
IDEM_PG_BUILD_PACKAGES="build-essential bison flex perl curl libreadline-dev zlib1g-dev libssl-dev
  pkg-config"

if [[ -z ${IDEM_CACHE:-} ]]; then
  # The postgres user runs the servers, so the cache must be readable by it: not under /root.
  if [[ $(id -u) -eq 0 ]]; then IDEM_CACHE=/var/cache/idempotency; else
    IDEM_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/idempotency
  fi
fi

# Checks IDEM_PG before anything is done: empty or 15 is Debian's PostgreSQL 15.
check_pg_major() {
  local major=${IDEM_PG:-15}
  [[ $major == 15 || -n ${IDEM_PG_SOURCE[$major]:-} ]] && return 0
  if [[ $major == 16 ]]; then
    echo "error: IDEM_PG=16: Debian's archive has no postgresql-16 source package (bookworm has 15, trixie 17, sid 18); supported: $IDEM_SUPPORTED_MAJORS" >&2
  else
    echo "error: IDEM_PG=$major is not supported; supported: $IDEM_SUPPORTED_MAJORS" >&2
  fi
  return 1
}

pg_major_prefix() { echo "$IDEM_CACHE/pg$1"; }

# The base address of the Debian archive this machine's apt uses (never written down here).
debian_mirror() {
  apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Created-By: Packages' 'Origin: Debian' \
    2>/dev/null | awk '$1 !~ /-/ { print $2; exit }'
}

sha256_is() { [[ -f $1 && $(sha256sum "$1" | cut -d' ' -f1) == "$2" ]]; }

# fetch_checked URI FILE SHA256: FILE holds URI's bytes with that SHA-256 (downloaded unless
# it already does).
fetch_checked() {
  sha256_is "$2" "$3" || { curl -fsSL --retry 3 -o "$2" "$1" && sha256_is "$2" "$3"; }
}

# fetch_source SUITE PACKAGE DEST: the upstream tarball of a Debian source package, checked
# against the archive's SHA-256 and unpacked into DEST (replaced). Only the .orig tarball is
# fetched: the build uses upstream's source, without Debian's packaging. One at a time (a lock
# in $IDEM_CACHE/apt): the private package lists and download folder are shared by builds that
# may run side by side (.ci/run builds in the background while tests run).
fetch_source() {
  mkdir -p "$IDEM_CACHE/apt" || return
  (flock 9 && fetch_source_locked "$@") 9>"$IDEM_CACHE/apt/.lock"
}
fetch_source_locked() {
  local suite=$1 pkg=$2 dest=$3 apt_dir=$IDEM_CACHE/apt mirror opts line uri file sum
  mirror=$(debian_mirror)
  if [[ -z $mirror ]]; then
    as_root apt-get update >/dev/null 2>&1 || true
    mirror=$(debian_mirror)
  fi
  [[ -n $mirror ]] || { echo "error: no Debian mirror in this machine's apt configuration: cannot download source package $pkg from suite $suite" >&2; return 1; }
  mkdir -p "$apt_dir/lists-$suite/partial" "$apt_dir/download"
  printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' \
    "$mirror" "$suite" >"$apt_dir/sources-$suite.list"
  opts=(-o "Dir::Etc::SourceList=$apt_dir/sources-$suite.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists-$suite")
  log "downloading source package $pkg from Debian suite $suite"
  # --print-uris in an empty folder: apt leaves out files it finds in the current one.
  rm -rf "$apt_dir/print" && mkdir -p "$apt_dir/print" || return
  line=$(apt-get "${opts[@]}" -qq update 2>/dev/null && cd "$apt_dir/print" &&
    apt-get "${opts[@]}" -qq --print-uris source "$pkg" 2>/dev/null |
    grep -F '.orig.tar.' | head -n1) || true
  read -r uri file _ sum <<<"$line"
  uri=${uri//\'/}
  sum=${sum#SHA256:}
  if [[ -z $uri ]] || ! fetch_checked "$uri" "$apt_dir/download/$file" "$sum"; then
    # The pinned tarball instead, from the same mirror's pool.
    if [[ -n ${IDEM_SOURCE_PINS[$pkg]:-} ]]; then
      read -r file sum <<<"${IDEM_SOURCE_PINS[$pkg]}"
      log "source package $pkg: the suite's newest tarball cannot be had; trying the pinned $file"
      uri="${mirror%/}/pool/main/${pkg:0:1}/$pkg/$file"
    fi
    if [[ -z ${IDEM_SOURCE_PINS[$pkg]:-} ]] || ! fetch_checked "$uri" "$apt_dir/download/$file" "$sum"; then
      echo "error: could not download source package $pkg from Debian suite $suite" >&2
      return 1
    fi
  fi
  rm -rf "$dest" && mkdir -p "$dest" &&
    tar -xf "$apt_dir/download/$file" -C "$dest" --strip-components=1
}

# The contrib modules the suites use on 17 and 18: amcheck (regress direct_storage, scripted
# wal_consistency), dblink (regress outbox, wait_committed), test_decoding (named in
# output_plugin_libraries), pg_stat_statements and pg_prewarm (bench/). The others (some fifty)
# are not built: a tenth of the build's time.
IDEM_PG_CONTRIB="amcheck dblink pg_prewarm pg_stat_statements test_decoding"

# build_pg_major MAJOR: PostgreSQL MAJOR (the server, its programs and libraries: no docs) with
# the contrib modules of IDEM_PG_CONTRIB, pg_regress and the isolation tester, built with
# injection points and their test module (the `faults` suite drives the extension's own points
# with them), and the extensions of IDEM_EXTENSION_SOURCES, installed under $IDEM_CACHE/pgMAJOR.
# Each part is built once (a stamp file marks it done), so an interrupted build resumes where
# it stopped; a build from before injection points has an older stamp and is made again.
# Under a lock per major: a second build of the same major (.ci/run's in the background, a test
# command's) waits for the first and then finds it done.
build_pg_major() {
  mkdir -p "$IDEM_CACHE" || return
  (flock 8 && build_pg_major_locked "$1") 8>"$IDEM_CACHE/.pg$1.lock"
}
build_pg_major_locked() {
  local major=$1 prefix src suite pkg started=$SECONDS contrib
  prefix=$(pg_major_prefix "$major")
  if [[ ! -f $prefix/.built-postgresql-injection-points ]]; then
    rm -rf "$prefix"
    read -r suite pkg <<<"${IDEM_PG_SOURCE[$major]}"
    # shellcheck disable=SC2086 # one package a word
    install_missing $IDEM_PG_BUILD_PACKAGES || return
    src=$IDEM_CACHE/src/$pkg
    timed_step "PostgreSQL $major: source download" fetch_source "$suite" "$pkg" "$src" || return
    log "building PostgreSQL $major into $prefix (a few minutes)"
    started=$SECONDS
    (cd "$src" && ./configure --prefix="$prefix" --without-icu --with-openssl --enable-debug \
      --enable-injection-points CFLAGS="-O2 -g" >configure.log &&
      make -s -j2 >build.log 2>&1 &&
      for contrib in $IDEM_PG_CONTRIB; do
        make -s -j2 -C "contrib/$contrib" >>build.log 2>&1 || exit
      done &&
      make -s install >install.log 2>&1 &&
      for contrib in $IDEM_PG_CONTRIB; do
        make -s -C "contrib/$contrib" install >>install.log 2>&1 || exit
      done &&
      make -s -C src/test/regress install >>install.log 2>&1 &&
      make -s -C src/test/isolation install >>install.log 2>&1 &&
      make -s -C src/test/modules/injection_points install >>install.log 2>&1) ||
      { echo "error: building PostgreSQL $major failed (logs in $src)" >&2; return 1; }
    note_step "PostgreSQL $major: configure, build, install" $((SECONDS - started))
    chmod -R a+rX "$IDEM_CACHE" && touch "$prefix/.built-postgresql-injection-points"
  fi
  local source
  for source in "${IDEM_EXTENSION_SOURCES[@]}"; do
    build_pgxs_source "$source" "$prefix" || return
  done
}

# build_pgxs_source "SUITE PACKAGE" PREFIX: a PGXS extension from its Debian source package,
# into the PostgreSQL at PREFIX.
build_pgxs_source() {
  local suite pkg prefix=$2 src
  read -r suite pkg <<<"$1"
  [[ -f $prefix/.built-$pkg ]] && return 0
  src=$IDEM_CACHE/src/$pkg-$(basename "$prefix")
  fetch_source "$suite" "$pkg" "$src" || return
  log "building $pkg for $("$prefix/bin/pg_config" --version)"
  local started=$SECONDS
  (cd "$src" && make -s -j2 PG_CONFIG="$prefix/bin/pg_config" >build.log 2>&1 &&
    make -s PG_CONFIG="$prefix/bin/pg_config" install >install.log 2>&1) ||
    { echo "error: building $pkg failed (logs in $src)" >&2; return 1; }
  note_step "$pkg: build, install ($(basename "$prefix"))" $((SECONDS - started))
  chmod -R a+rX "$prefix" && touch "$prefix/.built-$pkg"
}

# debian_pg_binaries VERSION: Debian's own packages of PostgreSQL at that exact version (server,
# client and server-dev, e.g. 15.18-0+deb12u1) unpacked into $IDEM_CACHE/pg-VERSION, a
# relocatable install beside the installed one; prints its bin folder. For tests that need
# another minor release than the installed one (test/scripted/pg_upgrade.sh).
debian_pg_binaries() {
  local version=$1 major=${1%%.*} dir=$IDEM_CACHE/pg-$1 tmp deb
  if [[ ! -f $dir/.unpacked ]]; then
    tmp=$IDEM_CACHE/apt/deb-$version
    rm -rf "$tmp" "$dir" && mkdir -p "$tmp" && chmod 0777 "$tmp" || return
    log "downloading Debian's PostgreSQL $version packages"
    (cd "$tmp" && apt-get download -qq "postgresql-$major=$version" \
      "postgresql-client-$major=$version" "postgresql-server-dev-$major=$version" >/dev/null) ||
      { echo "error: could not download Debian's postgresql-$major $version packages" >&2; return 1; }
    for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$dir" || return; done
    chmod -R a+rX "$dir" && touch "$dir/.unpacked" && rm -rf "$tmp"
  fi
  echo "$dir/usr/lib/postgresql/$major/bin"
}
