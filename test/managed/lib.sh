# shellcheck shell=bash
# The managed suite's server: a copy of $PG_CONFIG's PostgreSQL (binaries, libraries, shared
# files) under build/managed/root, relocated (PostgreSQL finds its libraries relative to its
# binaries), with pg_tle built from ../shared/vendor installed into the copy, and every file
# of the idempotency extension removed from it: the cluster cannot load the library, as on a
# managed database. The server's message translations (Debian's postgresql-15 ships them in
# /usr/share/locale) are copied in too: the suite runs a server whose lc_messages is German or
# Japanese. The system's PostgreSQL is read, never written.
#   managed_server        builds the copy (once per PostgreSQL version and pg_tle archive)
#   managed_cluster_start initdb + start with shared_preload_libraries = 'pg_tle'
#   managed_cluster_stop
# Then MPGBIN is the copy's bindir, MPORT / MSOCK the cluster's port and socket.

MANAGED_DIR=${MANAGED_DIR:-$IDEM_ROOT/build/managed}
MANAGED_ROOT=$MANAGED_DIR/root
PG_TLE_ARCHIVE=${PG_TLE_ARCHIVE:-$IDEM_ROOT/../shared/vendor/pg_tle-1.5.2.tar.gz}

managed_server() {
  local dir stamp want src
  stamp=$MANAGED_ROOT/.stamp
  want="$("$PG_CONFIG" --version) $(sha256sum "$PG_TLE_ARCHIVE" | cut -c1-16) translations"
  MPGBIN=$MANAGED_ROOT$("$PG_CONFIG" --bindir)
  if [[ -f $stamp && $(<"$stamp") == "$want" ]]; then return 0; fi
  [[ -f $PG_TLE_ARCHIVE ]] || { echo "no pg_tle archive at $PG_TLE_ARCHIVE" >&2; return 1; }
  rm -rf "$MANAGED_ROOT"
  for dir in "$("$PG_CONFIG" --bindir)" "$("$PG_CONFIG" --pkglibdir)" "$("$PG_CONFIG" --sharedir)"; do
    mkdir -p "$MANAGED_ROOT$(dirname "$dir")"
    cp -a "$dir" "$MANAGED_ROOT$dir"
  done
  # The translations, where the server looks for them (relative to its binaries).
  managed_translations "$MANAGED_ROOT$("$PG_CONFIG" --localedir)" || return 1
  # No idempotency library, control file or script: CREATE EXTENSION idempotency can only
  # find the edition that pg_tle holds.
  rm -f "$MANAGED_ROOT$("$PG_CONFIG" --pkglibdir)"/idempotency* \
    "$MANAGED_ROOT$("$PG_CONFIG" --sharedir)"/extension/idempotency*
  src=$MANAGED_DIR/pg_tle-src
  rm -rf "$src" && mkdir -p "$src"
  tar xzf "$PG_TLE_ARCHIVE" -C "$src" --strip-components=1
  if ! { make -C "$src" -j2 USE_PGXS=1 PG_CONFIG="$PG_CONFIG" >"$MANAGED_DIR/pg_tle-build.log" 2>&1 &&
    make -C "$src" USE_PGXS=1 PG_CONFIG="$PG_CONFIG" install DESTDIR="$MANAGED_ROOT" \
      >>"$MANAGED_DIR/pg_tle-build.log" 2>&1; }; then
    tail -n 20 "$MANAGED_DIR/pg_tle-build.log" >&2
    return 1
  fi
  [[ -f $MANAGED_ROOT$("$PG_CONFIG" --pkglibdir)/pg_tle.so ]] || return 1
  if is_root; then chmod -R a+rX "$MANAGED_ROOT"; fi
  echo "$want" >"$stamp"
}

# managed_translations DIR: the server's .mo files of every language into DIR/<lang>/LC_MESSAGES,
# from its own locale folder or, for a relocated copy of Debian's server, Debian's.
managed_translations() {
  local from mo lang
  from=$("$PG_CONFIG" --localedir)
  compgen -G "$from/*/LC_MESSAGES/postgres-*.mo" >/dev/null || from=/usr/share/locale
  for mo in "$from"/*/LC_MESSAGES/postgres-[0-9]*.mo; do
    [[ -f $mo ]] || { echo "no PostgreSQL translations in $from" >&2; return 1; }
    lang=${mo#"$from"/}
    lang=${lang%%/*}
    mkdir -p "$1/$lang/LC_MESSAGES" && cp "$mo" "$1/$lang/LC_MESSAGES/" || return 1
  done
}

managed_cluster_start() {
  local port=$1
  cluster_setup test-cluster/managed "$port"
  MPORT=$CLUSTER_PORT MSOCK=$CLUSTER_SOCK MDATA=$CLUSTER_DATA
  PGBIN=$MPGBIN cluster_init "$MDATA" "$MPORT" "$MSOCK" \
    "shared_preload_libraries = 'pg_tle'" "fsync = off" || return 1
  PGBIN=$MPGBIN cluster_start "$MDATA" || return 1
  # Nothing of the extension is loadable here.
  if [[ -e $MANAGED_ROOT$("$PG_CONFIG" --pkglibdir)/idempotency.so ]]; then
    echo "the server copy has an idempotency library" >&2
    return 1
  fi
}

managed_cluster_stop() {
  [[ -n ${MDATA:-} ]] || return 0
  PGBIN=$MPGBIN cluster_stop "$MDATA" >/dev/null 2>&1 || true
}

# mpsql [psql args]: the copy's psql on the managed cluster, as the superuser postgres unless
# -U says otherwise.
mpsql() {
  "$MPGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$MSOCK" -p "$MPORT" -U postgres "$@"
}
