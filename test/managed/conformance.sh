# shellcheck shell=bash
# The conformance part of the managed suite: the regression files that define behaviour
# (sql/NAME.sql) run against the managed edition the way pg_regress runs them against the
# extension, and are compared with the same expected output.
#   conformance_db DB        settings pg_regress gives its database
#   conformance_fresh DB     drops the partitions the edition's install made: the files
#                            start where CREATE EXTENSION leaves the extension (no partition
#                            but the default one until maintain() runs)
#   conformance_run DB TEST OUTDIR   sql/TEST.sql (or the edition's own
#                                    editions/managed/sql/TEST.sql) with psql -a -q from the
#                                    repository root, with pg_regress's time zone, date and
#                                    interval style; writes OUTDIR/TEST.out
#   conformance_expected TEST        the extension's expected/TEST.out, or the edition's own
#                                    editions/managed/expected/TEST.out where docs/managed.md
#                                    lists a difference
#   conformance_diff EXPECTED ACTUAL  diff -u of the two, CONTEXT lines left out of both: an
#                                    error raised in PL/pgSQL carries the function's context,
#                                    which the extension's C functions do not add
conformance_db() {
  mpsql -d "$1" -q -c "ALTER DATABASE \"$1\" SET lc_messages TO 'C'" \
    -c "ALTER DATABASE \"$1\" SET lc_monetary TO 'C'" -c "ALTER DATABASE \"$1\" SET lc_numeric TO 'C'" \
    -c "ALTER DATABASE \"$1\" SET lc_time TO 'C'" -c "ALTER DATABASE \"$1\" SET bytea_output TO 'hex'" \
    -c "ALTER DATABASE \"$1\" SET timezone_abbreviations TO 'Default'"
}

conformance_fresh() {
  mpsql -d "$1" -q -c "DO \$\$
    DECLARE part regclass;
    BEGIN
      FOR part IN SELECT inhrelid::regclass FROM pg_inherits
                   WHERE inhparent = 'idempotency.keys'::regclass
                     AND inhrelid <> 'idempotency.keys_default'::regclass LOOP
        EXECUTE format('DROP TABLE %s', part);
      END LOOP;
    END \$\$"
}

conformance_run() {
  local db=$1 test=$2 out=$3 file=sql/$2.sql
  # The edition's own tests (of what only it has) live in editions/managed/sql.
  [[ -f $IDEM_ROOT/editions/managed/sql/$test.sql ]] && file=editions/managed/sql/$test.sql
  (cd "$IDEM_ROOT" && PGTZ=PST8PDT PGDATESTYLE='Postgres, MDY' PGAPPNAME=pg_regress \
    PGOPTIONS='-c intervalstyle=postgres_verbose' \
    "$MPGBIN/psql" -X -a -q -h "$MSOCK" -p "$MPORT" -U postgres -d "$db" \
    <"$file" >"$out/$test.out" 2>&1) || true
}

conformance_expected() {
  if [[ -f $IDEM_ROOT/editions/managed/expected/$1.out ]]; then
    echo "$IDEM_ROOT/editions/managed/expected/$1.out"
  else
    echo "$IDEM_ROOT/expected/$1.out"
  fi
}

conformance_filter() {
  awk '/^CONTEXT:  /{ctx=1; next}
       ctx && /^(SQL statement|PL\/pgSQL function|SQL function) /{next}
       {ctx=0; print}' "$1"
}

conformance_diff() {
  diff -u --label "$1" --label "$2" <(conformance_filter "$1") <(conformance_filter "$2")
}
