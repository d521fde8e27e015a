#!/usr/bin/env bash
# Command 2: build everything and run every test suite against a throwaway cluster.
#   bash scripts/test.sh
#   IDEM_PG=18 bash scripts/test.sh     (the same against PostgreSQL 17 or 18, built from
#                                        Debian's source package on first use)
#   IDEM_SUITES="unit regress" bash scripts/test.sh    (a subset of: unit regress
#                                        isolation pgtap scripted examples citus clients
#                                        go java browser brokers jobs docs sanitizers faults
#                                        packaging managed monitoring)
#   IDEM_SCRIPTED="storm pg_upgrade" ...  (only these scripted tests)
#   IDEM_BUSY_CORES=2 ...                (N CPU burners at nice IDEM_BUSY_NICE, default 5,
#                                        while the tests run: they must pass on a busy machine)
# The citus suite (test/citus/*.sh) runs three-node Citus clusters of its own; it builds
# Citus from ../shared/vendor when citus.so is not installed, and is reported as skipped,
# with the reason, when neither is available or PostgreSQL is not 14 to 16.
# Each suite's line in the summary gives its time in seconds; each scripted test's and
# example's time is in its "ok"/"FAILED" line and in build/test-logs/timings.
# Ends with one line "N passed, M failed"; exits non-zero when anything failed.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$IDEM_ROOT"

ALL_SUITES="unit regress isolation pgtap scripted examples citus clients go java browser"
ALL_SUITES+=" brokers jobs docs sanitizers faults packaging managed monitoring"
SUITES=${IDEM_SUITES:-$ALL_SUITES}
for s in $SUITES; do
  [[ " $ALL_SUITES " == *" $s "* ]] || die "IDEM_SUITES: unknown suite '$s' (known: $ALL_SUITES)"
done
TIMEOUT=${IDEM_TEST_TIMEOUT:-900}   # seconds, per scripted test / example
LOGS=$IDEM_ROOT/build/test-logs
# shellcheck source=scripts/record.sh
source "$IDEM_ROOT/scripts/record.sh"

wanted() { [[ " $SUITES " == *" $1 "* ]]; }

# timed RUN_FUNCTION: runs a suite; its record lines count the seconds from here.
timed() {
  SUITE_STARTED=$SECONDS
  "$@"
}

# IDEM_BUSY_CORES=N: N busy loops at nice IDEM_BUSY_NICE (5) for the whole run, stopped at exit.
BURNERS=()
start_burners() {
  local i
  for ((i = 0; i < ${IDEM_BUSY_CORES:-0}; i++)); do
    nice -n "${IDEM_BUSY_NICE:-5}" bash -c 'while :; do :; done' &
    BURNERS+=($!)
  done
  [[ ${#BURNERS[@]} -eq 0 ]] || echo "IDEM_BUSY_CORES: ${#BURNERS[@]} CPU burners (nice ${IDEM_BUSY_NICE:-5}): ${BURNERS[*]}"
}
stop_burners() {
  local p
  for p in "${BURNERS[@]}"; do kill "$p" 2>/dev/null || true; done
  BURNERS=()
}

count() { grep -cE "$1" "$2" || true; }

# The clusters' TCP ports (54300-54599 plus IDEM_PORT_OFFSET) lie inside Linux's ephemeral
# range: an outgoing connection of any process may hold one just as a cluster starts on it
# ("Address already in use"). As root they are reserved, so the kernel never hands them to a
# client; the setting lasts until reboot.
reserve_cluster_ports() {
  local file=/proc/sys/net/ipv4/ip_local_reserved_ports current
  local range="$((54300 + ${IDEM_PORT_OFFSET:-0}))-$((54599 + ${IDEM_PORT_OFFSET:-0}))"
  is_root && [[ -w $file ]] || return 0
  current=$(<"$file")
  [[ ",$current," == *",$range,"* ]] && return 0
  if echo "${current:+$current,}$range" >"$file" 2>/dev/null; then
    log "reserved ports $range for the test clusters (net.ipv4.ip_local_reserved_ports)"
  fi
}

run_unit() { run_ctest unit build; }

# run_ctest SUITE BUILD-DIR [CMAKE-ARGS...]: the core and its GoogleTest tests, built in
# BUILD-DIR, under ctest.
run_ctest() {
  local suite=$1 dir=$2 log=$LOGS/$1.log rc=0 line failed total
  shift 2
  log "$suite tests (CMake + GoogleTest)"
  if ! { cmake -S . -B "$dir" -DIDEM_WERROR=ON "$@" && cmake --build "$dir" -j2; }; then
    record "$suite" 0 1 "build failed"
    return
  fi
  ctest --test-dir "$dir" --output-on-failure --no-tests=error 2>&1 | tee "$log" || rc=$?
  # "95% tests passed, 1 tests failed out of 20"
  line=$(sed -nE 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1 \2/p' "$log" | tail -n1)
  if [[ -z $line ]]; then
    record "$suite" 0 1 "ctest did not run (exit $rc)"
    return
  fi
  read -r failed total <<<"$line"
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then
    record "$suite" "$total" 1 "ctest exit $rc"
  else
    record "$suite" $((total - failed)) "$failed"
  fi
}

# sanitizers (one major: 15; another major's run names it in the summary):
# - the core and its unit tests built with -fsanitize=address,undefined (every report fatal:
#   the test that triggers it fails);
# - the regression suite against the extension built with UBSan (IDEM_SANITIZE=undefined),
#   on a cluster of its own, where any UBSan report or crash in the server log is a failure.
#   The library is loaded into a postgres that is not instrumented: ASan would need its
#   runtime loaded first into postgres itself (LD_PRELOAD of libasan into the postmaster and
#   every tool it starts), so the glue runs under UBSan only, whose runtime a shared library
#   can bring along.
# Then the checkout's own build is installed again.
run_sanitizers() {
  local san_flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
  local slog reports
  if [[ ${IDEM_PG:-15} != 15 && " ${IDEM_SUITES:-} " != *" sanitizers "* ]]; then
    record_elsewhere sanitizers "left to the IDEM_PG=15 run"
    return
  fi
  local failed_before=$FAILED
  ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_ctest sanitizers-unit "$IDEM_ROOT/build/sanitizers" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS="$san_flags" -DCMAKE_EXE_LINKER_FLAGS="$san_flags"
  # A report from a test that still passed (none should: every report aborts) fails too.
  reports=$(grep -cE "runtime error:|ERROR: (Address|Leak)Sanitizer" "$LOGS/sanitizers-unit.log" || true)
  if [[ $reports -gt 0 && $FAILED -eq $failed_before ]]; then
    record sanitizers-unit 0 "$reports" "sanitizer reports in ${LOGS#"$IDEM_ROOT"/}/sanitizers-unit.log"
  fi

  log "sanitizers: the extension with UBSan, the regression suite on a cluster of its own"
  SUITE_STARTED=$SECONDS
  if ! install_extension_with "$PG_CONFIG" IDEM_SANITIZE=undefined; then
    record sanitizers-regress 0 1 "the UBSan build did not build or install"
  else
    local main=("$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "$CLUSTER_LOG")
    cluster_setup test-cluster/sanitizers 54496
    SANITIZER_DATA=$CLUSTER_DATA # stopped at exit, whatever happens
    slog=$CLUSTER_LOG
    rm -f "$slog"
    if cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "fsync = off" &&
      UBSAN_OPTIONS=print_stacktrace=1:abort_on_error=1 cluster_start "$CLUSTER_DATA"; then
      PGHOST=$CLUSTER_SOCK PGPORT=$CLUSTER_PORT run_installcheck sanitizers-regress \
        regression.diffs ISOLATION= TAP_TESTS=
      reports=$(grep -cE "runtime error:|terminated by signal" "$slog" || true)
      if [[ $reports -gt 0 ]]; then
        grep -E -A8 "runtime error:|terminated by signal" "$slog" | head -n 40 || true
        record sanitizers-log 0 "$reports" "UBSan reports or crashes in ${slog#"$IDEM_ROOT"/}"
      else
        record sanitizers-log 1 0 "no UBSan report in the server log"
      fi
    else
      record sanitizers-regress 0 1 "the cluster with the UBSan build did not start"
    fi
    cluster_stop "$CLUSTER_DATA" >/dev/null 2>&1 || true
    CLUSTER_DATA=${main[0]} CLUSTER_PORT=${main[1]} CLUSTER_SOCK=${main[2]} CLUSTER_LOG=${main[3]}
  fi
  log "installing the checkout's own build again"
  as_root make -C "$IDEM_ROOT" install PG_CONFIG="$PG_CONFIG" >/dev/null
}

# run_installcheck SUITE DIFFS MAKE-ARGS...: pg_regress or pg_isolation_regress via PGXS.
run_installcheck() {
  local suite=$1 diffs=$2 log=$LOGS/$1.log rc=0 passed failed
  shift 2
  log "$suite tests (make installcheck)"
  rm -f "$diffs"
  make installcheck PG_CONFIG="$PG_CONFIG" "$@" 2>&1 | tee "$log" || rc=$?
  # "test name ... ok" up to 15, "ok 1 - name" (TAP) from 16 on.
  passed=$(count '^(test +| +)[^ ]+ +\.\.\. +(ok|failed \(ignored\))|^ok [0-9]+ +[-+] ' "$log")
  failed=$(count '^(test +| +)[^ ]+ +\.\.\. +FAILED|^not ok [0-9]+ +[-+] ' "$log")
  if [[ -f $diffs && $failed -gt 0 ]]; then
    echo "=== $diffs"
    cat "$diffs"
  fi
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then
    record "$suite" "$passed" 1 "make installcheck exit $rc"
  else
    record "$suite" "$passed" "$failed"
  fi
}

tsql() { cluster_psql "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" -q "$@"; }

run_pgtap() {
  local log=$LOGS/pgtap.log rc=0 files counts passed failed
  files=(test/pgtap/*.sql)
  [[ -e ${files[0]:-} ]] || { record pgtap 0 0 "no test/pgtap/*.sql"; return; }
  log "pgTAP tests (pg_prove)"
  if ! tsql -d postgres -c 'SET client_min_messages = warning' \
    -c 'DROP DATABASE IF EXISTS pgtap_test' -c 'CREATE DATABASE pgtap_test' ||
    ! tsql -d pgtap_test -c 'CREATE EXTENSION pgtap'; then
    record pgtap 0 1 "could not create database pgtap_test"
    return
  fi
  pg_prove --psql-bin "$PGBIN/psql" -d pgtap_test "${files[@]}" 2>&1 | tee "$log" || rc=$?
  # "Files=2, Tests=25, ..." and, per failing file, "(Wstat: 0 Tests: 10 Failed: 2)"
  counts=$(awk '
    /^Files=[0-9]+, Tests=[0-9]+/ { split($2, a, "="); total = a[2] + 0 }
    /\(Wstat: .* Failed: [0-9]+\)/ { n = $NF + 0; bad += n; files += (n > 0 ? n : 1) }
    END { print total - bad, files + 0 }' "$log")
  read -r passed failed <<<"$counts"
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then
    record pgtap "$passed" 1 "pg_prove exit $rc"
  else
    record pgtap "$passed" "$failed"
  fi
}

# run_scripts SUITE TEST...: each test is one pass or failure; its log is shown on failure.
run_scripts() {
  local suite=$1 t name log passed=0 failed=0 runner rc started secs
  shift
  for t in "$@"; do
    name=$(basename "$t" .sh)
    [[ $suite == examples ]] && name=$(basename "$(dirname "$t")")
    log=$LOGS/$suite-$name.log
    runner=("$IDEM_ROOT/$t")
    [[ -x $t ]] || runner=(bash "$IDEM_ROOT/$t")
    log "$suite: $t"
    # Examples run from their own folder, scripted tests from the repo root.
    rc=0
    started=$SECONDS
    (if [[ $suite == examples ]]; then cd "$(dirname "$t")"; fi
      PGDATABASE=postgres exec timeout --foreground -k 10 "$TIMEOUT" "${runner[@]}") >"$log" 2>&1 </dev/null || rc=$?
    [[ $rc -eq 130 ]] && exit 130 # interrupted (Ctrl-C)
    secs=$((SECONDS - started))
    if [[ $rc -eq 0 ]]; then
      passed=$((passed + 1))
      echo "ok     $t (${secs}s)"
      echo "$secs $suite $name ok" >>"$LOGS/timings"
    else
      failed=$((failed + 1))
      echo "$secs $suite $name FAILED" >>"$LOGS/timings"
      echo "FAILED $t (exit $rc, ${secs}s), log $log:"
      sed 's/^/    /' "$log"
    fi
  done
  record "$suite" "$passed" "$failed"
}

# The citus suite: left to the runs of the majors Citus supports (the reason in the summary);
# on those, a Citus that cannot be built or installed fails it.
run_citus() {
  local why tests=() t rc=0
  why=$(ensure_citus) || rc=$?
  if [[ $rc -eq 2 ]]; then
    echo "citus suite not run here: $why"
    record_elsewhere citus "left to the runs of PostgreSQL 14 to 16: $why"
    return
  elif [[ $rc -ne 0 ]]; then
    record citus 0 1 "Citus is not available: $why"
    return
  fi
  for t in test/citus/*.sh; do [[ -x $t ]] && tests+=("$t"); done
  run_scripts citus "${tests[@]}"
}

# clients: the Python package (installed with pip into a venv that sees Debian's psycopg and
# pytest) under pytest, and the Node package (its locked dev dependencies installed with npm ci)
# under node --test, against the test cluster. Each runner's own summary gives the counts; a
# run that prints none counts as a failure.
run_clients() {
  run_clients_python
  run_clients_node
}

run_clients_python() {
  local log venv=$IDEM_ROOT/build/py-venv rc line passed failed
  log=$LOGS/clients-py.log
  log "clients: Python (pytest)"
  rc=0
  {
    rm -rf "$venv" &&
      /usr/bin/python3 -m venv --without-pip --system-site-packages "$venv" &&
      "$venv/bin/python" -m pip install --no-build-isolation --no-index --no-deps --quiet \
        "$IDEM_ROOT/clients/python" &&
      (cd "$IDEM_ROOT/clients/python" && PGDATABASE=postgres timeout -k 10 "$TIMEOUT" \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider tests)
  } >"$log" 2>&1 </dev/null || rc=$?
  tail -n 15 "$log"
  # "3 failed, 250 passed, 1 error in 60.1s" (any order), or "250 passed in 60.1s"
  line=$(grep -E '^=*.*[0-9]+ (passed|failed|error).* in [0-9.]+s' "$log" | tail -n1)
  if [[ -z $line ]]; then
    record clients-py 0 1 "pytest did not run (exit $rc), log ${log#"$IDEM_ROOT"/}"
  else
    passed=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed.*/\2/p' <<<"$line")
    failed=$(( $(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<" $line") + 0 +
      $(sed -nE 's/.* ([0-9]+) errors?.*/\1/p' <<<" $line") + 0 ))
    if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
    record clients-py "${passed:-0}" "$failed"
  fi
}

run_clients_node() {
  run_node_suite clients-node "$IDEM_ROOT/clients/node" "$IDEM_ROOT/clients/node"
  # The same suite on the oldest pg of the package's peer range (test/pg-oldest's lock file),
  # where the client's fast path through pg's internals is off: a copy of the package with
  # that node_modules.
  local copy=$IDEM_ROOT/build/node-pg-oldest
  rm -rf "$copy" && mkdir -p "$copy" &&
    cp -r "$IDEM_ROOT"/clients/node/{index.js,index.d.ts,action.d.ts,fastify.d.ts,nestjs.d.ts,package.json,package-lock.json,lib,test} "$copy" &&
    rm -rf "$copy/test/pg-oldest/node_modules" &&
    ln -s "$IDEM_ROOT/clients/node/test/pg-oldest/node_modules" "$copy/node_modules"
  run_node_suite clients-node-pg-oldest "$IDEM_ROOT/clients/node/test/pg-oldest" "$copy"
}

# run_node_suite SUITE LOCK_DIR DIR: installs LOCK_DIR's node_modules from its lock file, then
# runs DIR's test/*.test.js under node --test against the test cluster.
run_node_suite() {
  local log=$LOGS/$1.log rc=0
  log "clients: Node (node --test) in ${3#"$IDEM_ROOT"/}"
  {
    "$IDEM_ROOT/scripts/npm_ci.sh" "$2" &&
      # --test-timeout bounds each file as well as each test: the encoding matrix's file takes
      # up to two minutes on a loaded machine.
      (cd "$3" && PGDATABASE=postgres timeout -k 10 "$TIMEOUT" \
        node --test --test-reporter=tap --test-concurrency=1 --test-timeout=600000 \
          test/*.test.js)
  } >"$log" 2>&1 </dev/null || rc=$?
  record_node_tap "$1" "$log" "$rc"
}

# go: the Go client (clients/go) and its example service (examples/http-go) under go vet and
# go test, in module mode and offline: the client's module (the standard library only) as a
# user's build sees it, then the modules that need drivers or routers (clients/go/drivertest:
# the tests against the test cluster on pgx v4 and lib/pq, and drivertest/frameworks: the gin
# and echo adapters and chi as routers; the pgxv4 adapter; examples/http-go) with -mod=vendor
# over vendor folders that scripts/go_vendor.py links to the Go sources of Debian's packages
# (/usr/share/gocode), which it installs when missing; no module proxy is asked. The restart
# tests restart the test cluster (IDEM_GO_RESTART: -m fast; IDEM_GO_CRASH: -m immediate).
# Counts: go test -v's top-level "--- PASS" / "--- FAIL" lines; a vet or build failure fails
# the suite.
run_go() {
  local log=$LOGS/go.log rc=0 passed failed skipped missing restart crash dir
  local go=$IDEM_ROOT/clients/go example=$IDEM_ROOT/examples/http-go
  local adapters=(github.com/pgidempotency/idempotency/clients/go/idemgin
    github.com/pgidempotency/idempotency/clients/go/idemecho)
  log "go: the Go client (go vet, go test)"
  # shellcheck disable=SC2086 # word splitting of the list is intended
  missing=$(missing_packages $GO_PACKAGES | tr '\n' ' ')
  if [[ -n ${missing// /} ]] && ! apt_install $missing >"$LOGS/go-apt.log" 2>&1; then
    record go 0 1 "could not install $missing (log ${LOGS#"$IDEM_ROOT"/}/go-apt.log)"
    return
  fi
  restart="$PGBIN/pg_ctl -D $CLUSTER_DATA -l $CLUSTER_LOG -m fast -w restart"
  crash="$PGBIN/pg_ctl -D $CLUSTER_DATA -l $CLUSTER_LOG -m immediate -w restart"
  if is_root; then
    restart="cd / && runuser -u postgres -- $restart"
    crash="cd / && runuser -u postgres -- $crash"
  fi
  (
    export GO111MODULE=on GOFLAGS= GOPROXY=off GOCACHE=$IDEM_ROOT/build/go-cache \
      GOPATH=$IDEM_ROOT/build/gopath
    git -C "$IDEM_ROOT" ls-files -z -- clients/go examples/http-go | grep -z '\.go$' |
      (cd "$IDEM_ROOT" && xargs -0 gofmt -l) | sed 's/^/not gofmt-formatted: /' | grep . && exit 1
    for dir in "$go/drivertest" "$go/pgxv4" "$example"; do
      /usr/bin/python3 "$IDEM_ROOT/scripts/go_vendor.py" "$dir" || exit 1
    done
    (cd "$go" && go vet ./... && go test -count=1 -v ./...) || exit 1
    export GOFLAGS=-mod=vendor PGDATABASE=postgres IDEM_GO_RESTART=$restart IDEM_GO_CRASH=$crash
    (cd "$go/pgxv4" && go vet ./...) || exit 1
    (cd "$example" && go vet ./...) || exit 1
    (cd "$go/drivertest" && go vet ./... "${adapters[@]}") || exit 1
    for dir in "$go/drivertest" "$example"; do
      (cd "$dir" && timeout -k 10 "$TIMEOUT" go test -count=1 -p 1 -v -timeout "${TIMEOUT}s" ./...) ||
        rc=1
    done
    exit $rc
  ) >"$log" 2>&1 </dev/null || rc=$?
  grep -E '^(--- FAIL|FAIL|ok|not gofmt)|^(# |vet: )|go_vendor' "$log" | tail -n 20
  passed=$(count '^--- PASS' "$log")
  failed=$(count '^--- FAIL' "$log")
  skipped=$(count '^--- SKIP' "$log")
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
  record go "$passed" "$failed" "$( ((skipped == 0)) || echo "$skipped skipped, ")log ${log#"$IDEM_ROOT"/}"
}

# java: the Java client (clients/java: JDBC over Debian's pgjdbc, the Jakarta servlet filter in
# an embedded Tomcat 10.1) under JUnit 5, against the test cluster over its Unix socket; the
# restart test restarts the test cluster (IDEM_JAVA_RESTART). Built and tested by Maven
# (clients/java/pom.xml, mvn test) offline: clients/java/maven-settings.xml sends every
# repository to Debian's /usr/share/maven-repo, the local repository is build/m2; installs its
# Debian packages when missing. Counts: Surefire's "Tests run: N, Failures: F, Errors: E,
# Skipped: S" summary; a build failure fails the suite.
run_java() {
  local log=$LOGS/java.log rc=0 line total failures errors skipped passed failed missing restart
  log "java: the Java client (mvn test, JUnit 5)"
  # shellcheck disable=SC2086 # word splitting of the list is intended
  missing=$(missing_packages $JAVA_PACKAGES | tr '\n' ' ')
  if [[ -n ${missing// /} ]] && ! apt_install $missing >"$LOGS/java-apt.log" 2>&1; then
    record java 0 1 "could not install $missing (log ${LOGS#"$IDEM_ROOT"/}/java-apt.log)"
    return
  fi
  restart="$PGBIN/pg_ctl -D $CLUSTER_DATA -l $CLUSTER_LOG -m fast -w restart"
  if is_root; then restart="cd / && runuser -u postgres -- $restart"; fi
  # (no maven-clean-plugin in Debian 12: target/ is removed by hand)
  (cd "$IDEM_ROOT/clients/java" && rm -rf target && PGDATABASE=postgres IDEM_JAVA_RESTART=$restart \
    timeout -k 10 "$TIMEOUT" mvn -B -s maven-settings.xml -Dmaven.repo.local="$IDEM_ROOT/build/m2" \
      test) >"$log" 2>&1 </dev/null || rc=$?
  grep -E '<<< (FAILURE|ERROR)|Tests run:.*Fail|COMPILATION ERROR|BUILD (SUCCESS|FAILURE)' "$log" | tail -n 20
  # the last summary: "[INFO] Tests run: 120, Failures: 0, Errors: 0, Skipped: 0"
  line=$(grep -E '^\[[A-Z]+\] Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$' "$log" | tail -n1)
  read -r total failures errors skipped < <(sed -E 's/.*Tests run: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+), Skipped: ([0-9]+)/\1 \2 \3 \4/' <<<"${line:-Tests run: 0, Failures: 0, Errors: 0, Skipped: 0}")
  failed=$((failures + errors))
  passed=$((total - failed - skipped))
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
  record java "$passed" "$failed" "$( ((skipped == 0)) || echo "$skipped skipped, ")log ${log#"$IDEM_ROOT"/}"
}

# record_node_tap SUITE LOG EXIT: records the totals of node --test's TAP reporter in LOG
# ("# pass 230", "# fail 0", "# cancelled 0"); a run that printed none is a failure.
record_node_tap() {
  local suite=$1 log=$2 rc=$3 passed failed
  grep -E '^(not ok|# (tests|pass|fail|cancelled) )' "$log" | tail -n 15
  passed=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$log" | tail -n1)
  failed=$(( $(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$log" | tail -n1) + 0 +
    $(sed -nE 's/^# cancelled ([0-9]+)$/\1/p' "$log" | tail -n1) + 0 ))
  if [[ -z $passed ]]; then
    record "$suite" 0 1 "node --test did not run (exit $rc), log ${log#"$IDEM_ROOT"/}"
  else
    if [[ $rc -ne 0 && ${failed:-0} -eq 0 ]]; then failed=1; fi
    record "$suite" "$passed" "${failed:-0}"
  fi
}

# browser: the HTTP example's order page (examples/http-node/public) in Debian's chromium,
# headless, driven by playwright-core (from the example's lock file; it downloads no browser),
# against the example server and the test cluster, through a proxy that misbehaves on purpose
# (examples/http-node/browser). A screenshot per scenario is kept in build/browser.
run_browser() {
  local log=$LOGS/browser.log rc=0 dir=$IDEM_ROOT/examples/http-node
  local shots=$IDEM_ROOT/build/browser
  log "browser: the order page in chromium (node --test)"
  rm -rf "$shots"
  {
    install_missing $BROWSER_PACKAGES &&
      PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$IDEM_ROOT/scripts/npm_ci.sh" "$dir" &&
      tsql -d postgres -c 'SET client_min_messages = warning' \
        -c 'DROP DATABASE IF EXISTS http_browser WITH (FORCE)' -c 'CREATE DATABASE http_browser' &&
      (cd "$dir" && export PGDATABASE=http_browser CHROMIUM=/usr/bin/chromium \
        BROWSER_SCREENSHOTS=$shots && timeout -k 10 "$TIMEOUT" node --test \
          --test-reporter=tap --test-concurrency=1 --test-timeout=300000 browser/*.test.js)
  } >"$log" 2>&1 </dev/null || rc=$?
  record_node_tap browser "$log" "$rc"
}

# faults: the fault tests (test/faults/*.sh, each on a cluster of its own) drive the
# extension's fault points (src/pg/fault_points.hpp). A server with injection points (17 and
# later built with --enable-injection-points, as scripts/majors.sh builds them) runs them with
# the usual build; on any other server the suite installs the faults build (make
# IDEM_FAULT_POINTS=1, made in a copy under build/) for its run, then the usual build again.
run_faults() {
  local tests=() t own=1 why=
  for t in test/faults/*.sh; do [[ -x $t ]] && tests+=("$t"); done
  if [[ $("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/') -ge 17 ]] &&
    grep '^#define USE_INJECTION_POINTS 1' "$("$PG_CONFIG" --includedir-server)/pg_config.h" >/dev/null; then
    own=0
  fi
  log "faults tests ($([[ $own == 1 ]] && echo "the faults build" || echo "injection points"))"
  if [[ $own == 1 ]]; then
    install_extension_with "$PG_CONFIG" IDEM_FAULT_POINTS=1 || why="the faults build failed"
  else
    IDEM_WERROR=1 build_and_install || why="the extension did not build or install"
  fi
  if [[ -n $why ]]; then
    record faults 0 1 "not run: $why"
  else
    run_scripts faults "${tests[@]}"
  fi
  if [[ $own == 1 ]] && ! IDEM_WERROR=1 build_and_install >/dev/null; then
    record faults 0 1 "the usual build could not be installed again"
  fi
}

# brokers: the reference consumers of examples/consumers (Python and Node, queues and streams)
# against a private RabbitMQ (Debian's rabbitmq-server on our own loopback ports, never the
# system service), killed and redelivered (test/brokers/brokers_test.py: one count per
# scenario); then bench/brokers.sh --smoke, so the benchmark cannot rot.
run_brokers() {
  local log=$LOGS/brokers.log rc=0 passed failed
  log "brokers: RabbitMQ consumers (test/brokers)"
  if ! { ensure_rabbitmq && "$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/examples/consumers"; } \
    >"$log" 2>&1 </dev/null; then
    tail -n 20 "$log"
    record brokers 0 1 "rabbitmq-server, python3-pika or the npm packages did not install"
    return
  fi
  export BROKER_PORT=$((20072 + ${IDEM_PORT_OFFSET:-0})) BROKER_DIR=$IDEM_ROOT/build/brokers
  rm -rf "$BROKER_DIR"
  PGDATABASE=postgres timeout -k 10 "$TIMEOUT" /usr/bin/python3 test/brokers/brokers_test.py \
    2>&1 </dev/null | tee -a "$log" || rc=$?
  passed=$(sed -nE 's/^# passed ([0-9]+) failed ([0-9]+)$/\1/p' "$log")
  failed=$(sed -nE 's/^# passed ([0-9]+) failed ([0-9]+)$/\2/p' "$log")
  if [[ -z $passed ]]; then
    record brokers 0 1 "brokers_test.py did not finish (exit $rc), log ${log#"$IDEM_ROOT"/}"
    return
  fi
  [[ $rc -ne 0 && $failed -eq 0 ]] && failed=1
  log "brokers: bench/brokers.sh --smoke"
  if PGDATABASE=postgres timeout -k 10 "$TIMEOUT" bash bench/brokers.sh --smoke \
    >>"$log" 2>&1 </dev/null; then
    passed=$((passed + 1))
    echo "ok     bench/brokers.sh --smoke"
  else
    failed=$((failed + 1))
    echo "FAILED bench/brokers.sh --smoke, log ${log#"$IDEM_ROOT"/}"
  fi
  record brokers "$passed" "$failed"
}

# jobs: Celery (RabbitMQ), BullMQ (Redis) and NATS JetStream workers against brokers of our own
# on loopback ports (test/jobs/jobs_test.py: one count per scenario): Celery's ExactlyOnceTask
# contract, then per framework a chaos run (workers SIGKILLed again and again, the broker and
# this cluster restarted once each: every effect exactly once) and, for Celery and BullMQ, the
# same run with the framework's own dedup only, which must double. JOBS_N tasks per run
# (default 300 here; the issue's figure is 2000). Then bench/jobs.sh --smoke, so the
# benchmark cannot rot.
run_jobs() {
  local log=$LOGS/jobs.log rc=0 passed failed
  log "jobs: Celery, BullMQ and JetStream workers (test/jobs)"
  if ! { ensure_jobs && "$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/examples/consumers"; } \
    >"$log" 2>&1 </dev/null; then
    tail -n 20 "$log"
    record jobs 0 1 "the brokers, Celery or the npm packages did not install"
    return
  fi
  export JOBS_PORT=$((20172 + ${IDEM_PORT_OFFSET:-0})) JOBS_DIR=$IDEM_ROOT/build/jobs
  rm -rf "$JOBS_DIR"
  PG_RESTART="source '$IDEM_ROOT/scripts/lib.sh' && cluster_crash '$CLUSTER_DATA' &&
    cluster_start '$CLUSTER_DATA'" JOBS_N=${JOBS_N:-300} PGDATABASE=postgres \
    timeout -k 10 "$TIMEOUT" /usr/bin/python3 test/jobs/jobs_test.py 2>&1 </dev/null |
    tee -a "$log" | grep --line-buffered -E '^(ok|not ok|#)' || rc=$?
  passed=$(sed -nE 's/^# passed ([0-9]+) failed ([0-9]+)$/\1/p' "$log")
  failed=$(sed -nE 's/^# passed ([0-9]+) failed ([0-9]+)$/\2/p' "$log")
  if [[ -z $passed ]]; then
    record jobs 0 1 "jobs_test.py did not finish (exit $rc), log ${log#"$IDEM_ROOT"/}"
    return
  fi
  [[ $passed -eq 0 && $failed -eq 0 ]] && failed=1
  log "jobs: bench/jobs.sh --smoke"
  if timeout -k 10 "$TIMEOUT" bash bench/jobs.sh --smoke >>"$log" 2>&1 </dev/null; then
    passed=$((passed + 1))
    echo "ok     bench/jobs.sh --smoke"
  else
    failed=$((failed + 1))
    echo "FAILED bench/jobs.sh --smoke, log ${log#"$IDEM_ROOT"/}"
  fi
  record jobs "$passed" "$failed"
}

# docs: the client installs of docs/clients-*.md from a clean venv and an empty npm project
# (test/docs/install.sh), the block runner's self-check, then every code block of README.md
# and docs/*.md that is not marked as a fragment, run against the test cluster
# (test/docs/run_snippets.py), each page in a fresh database. One pass or failure per
# install, for the self-check and per block.
run_docs() {
  local log=$LOGS/docs.log venv=$IDEM_ROOT/build/docs-venv rc=0 passed=0 failed=0 what line
  log "docs: client installs and code blocks"
  for what in python node; do
    if bash test/docs/install.sh "$what" "$venv" >>"$log" 2>&1 </dev/null; then
      passed=$((passed + 1))
      echo "ok     install of the $what client"
    else
      failed=$((failed + 1))
      echo "FAILED install of the $what client, log ${log#"$IDEM_ROOT"/}"
    fi
  done
  docs_snippets() {
    # IDEM_DOCS_RESTART: the command the checks restart the test cluster with (fast and
    # immediate), to see each server example keep serving.
    npm_config_audit=false npm_config_fund=false npm_config_prefer_offline=true \
      IDEM_DOCS_RESTART="bash $IDEM_ROOT/test/docs/restart.sh" \
      PATH="$PGBIN:$PATH" timeout -k 10 "$TIMEOUT" /usr/bin/python3 test/docs/run_snippets.py \
      --python "$venv/bin/python" --node-app test/docs/node-app --root "$IDEM_ROOT" "$@"
  }
  "$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/test/docs/node-app" >>"$log" 2>&1 </dev/null || true
  # node-app links the client (file:), whose own imports (fastify-plugin for the Fastify
  # page) resolve from clients/node/node_modules: installed here too when the docs suite runs
  # without the clients suite.
  "$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/clients/node" >>"$log" 2>&1 </dev/null || true
  # docs/consumers.md's walk runs a broker of its own (examples/consumers/broker.sh).
  ensure_rabbitmq >>"$log" 2>&1 </dev/null || true
  # docs/operations.md's Monitoring section runs promtool.
  ensure_monitoring >>"$log" 2>&1 </dev/null || true
  # The runner on a page of known blocks: it must pass, fail and skip exactly these.
  docs_snippets test/docs/selftest.md >"$log.self" 2>&1 </dev/null || true
  if grep -E '^(ok|FAILED) |^docs snippets: ' "$log.self" |
    diff -u test/docs/selftest.expected - >>"$log"; then
    passed=$((passed + 1))
    echo "ok     the block runner's self-check (test/docs/selftest.md)"
  else
    failed=$((failed + 1))
    echo "FAILED the block runner's self-check, diff in ${log#"$IDEM_ROOT"/}"
  fi
  docs_snippets README.md docs/*.md >"$log.blocks" 2>&1 </dev/null || rc=$?
  # Each failing block with its output (up to the next block's line).
  awk '/^FAILED /{p=1} /^(ok |docs snippets: )/{p=0} p' "$log.blocks" | head -n 300
  # "docs snippets: 40 passed, 1 failed, 12 fragments not run"
  line=$(grep -E '^docs snippets: ' "$log.blocks" | tail -n1)
  cat "$log.blocks" >>"$log"
  if [[ -z $line ]]; then
    record docs "$passed" $((failed + 1)) \
      "the blocks did not run (exit $rc), log ${log#"$IDEM_ROOT"/}"
    return
  fi
  echo "$line"
  passed=$((passed + $(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$line")))
  failed=$((failed + $(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$line")))
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
  record docs "$passed" "$failed" \
    "$(sed -nE 's/.*, ([0-9]+ fragments) not run/\1 not run/p' <<<"$line")"
}

# packaging (one major: 15; another major's summary names it): test/packaging/run.sh builds the
# packages users install with scripts/release.sh (the .deb, the PGXN zip, the wheel, the sdist,
# the npm tarball), runs lintian, swaps the checkout's own install for the .deb on the system's
# PostgreSQL (a cluster of its own, the regression suite and the clients against it, an update
# from 0.2.0, a purge that leaves nothing), installs the zip with pgxnclient, and installs the
# checkout's own build again at the end. One pass or failure per check.
run_packaging() {
  local log=$LOGS/packaging.log line
  if [[ ${IDEM_PG:-15} != 15 ]]; then
    record_elsewhere packaging "left to the IDEM_PG=15 run"
    return
  fi
  log "packaging: the .deb, the PGXN zip and the client packages (test/packaging/run.sh)"
  # Three builds of the extension (the .deb, the PGXN zip, the checkout's again) in one bound;
  # none while waiting for IDEM_PG15_LOCK (a shared machine), as a run stopped then, between
  # the package's install and the checkout's, would leave the system's server without the
  # checkout's build.
  local limit=(timeout -k 10 "$((TIMEOUT * 3))")
  [[ -z ${IDEM_PG15_LOCK:-} ]] || limit=()
  LOGS=$LOGS "${limit[@]}" bash test/packaging/run.sh 2>"$log" </dev/null | tee -a "$log" || true
  # "packaging: 14 passed, 0 failed"
  line=$(grep -E '^packaging: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n1)
  if [[ -z $line ]]; then
    tail -n 30 "$log"
    record packaging 0 1 "test/packaging/run.sh did not finish, log ${log#"$IDEM_ROOT"/}"
    return
  fi
  record packaging "$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$line")" \
    "$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$line")"
}

# run_suite_script SUITE SCRIPT WHAT: a suite run by one script (ok/FAILED lines, then
# "# passed N failed M"), in the IDEM_PG=15 run unless named in IDEM_SUITES.
run_suite_script() {
  local suite=$1 script=$2 log=$LOGS/$1.log rc=0 passed failed
  if [[ ${IDEM_PG:-15} != 15 && " ${IDEM_SUITES:-} " != *" $suite "* ]]; then
    record_elsewhere "$suite" "left to the IDEM_PG=15 run"
    return
  fi
  log "$suite: $3 ($script)"
  PGDATABASE=postgres timeout -k 10 "$TIMEOUT" bash "$script" >"$log" 2>&1 </dev/null || rc=$?
  grep -E '^(ok|FAILED|    )' "$log" || true
  passed=$(sed -nE 's/^# passed ([0-9]+) failed ([0-9]+)$/\1/p' "$log")
  failed=$(sed -nE 's/^# passed ([0-9]+) failed ([0-9]+)$/\2/p' "$log")
  if [[ -z $passed ]]; then
    tail -n 20 "$log"
    record "$suite" 0 1 "$script did not finish (exit $rc), log ${log#"$IDEM_ROOT"/}"
    return
  fi
  [[ $rc -ne 0 && $failed -eq 0 ]] && failed=1
  record "$suite" "$passed" "$failed"
}

# managed: the managed edition (editions/managed, SQL and PL/pgSQL only) on a copy of the
# server with pg_tle built from ../shared/vendor and no idempotency library, installed through
# pg_tle and with psql -f by a role that is not a superuser; the extension's regression files
# and isolation specs run against it (test/managed/run.sh), and a database moves from it to
# the extension (test/managed/move.sh, on a cluster of its own with the build installed above);
# then bench/peers's Express service against the edition, end to end, as the application role
# of docs/managed.md (BENCH_EDITION=managed bash bench/peers.sh --smoke, faults included).
# The same whatever the major: run once, by the run against 15; another major's summary names it.
run_managed() {
  run_suite_script managed test/managed/run.sh "the managed edition through pg_tle and psql -f"
}

# monitoring: promtool's unit tests of the alert rules, then postgres_exporter and Prometheus
# against a cluster of its own.
run_monitoring() {
  run_suite_script monitoring test/monitoring/run.sh \
    "alert rules, postgres_exporter and Prometheus"
}

SANITIZER_DATA=
stop_test_cluster() {
  cluster_stop "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" >/dev/null 2>&1 || true
  if [[ -n $SANITIZER_DATA ]]; then cluster_stop "$SANITIZER_DATA" >/dev/null 2>&1 || true; fi
}

rm -rf "$LOGS"
mkdir -p "$LOGS"
# The setup steps' times (apt installs, npm ci, builds), listed in the summary.
export IDEM_STEP_TIMES=$LOGS/steps
: >"$IDEM_STEP_TIMES"
if ! ensure_packages; then
  echo "0 passed, 1 failed"
  exit 1
fi

reserve_cluster_ports
start_burners
trap stop_burners EXIT
wanted unit && timed run_unit

cluster_suites=()
for s in regress isolation pgtap scripted examples citus clients go java browser brokers jobs \
  docs sanitizers managed monitoring; do
  if wanted "$s"; then cluster_suites+=("$s"); fi
done
if [[ ${#cluster_suites[@]} -gt 0 ]]; then
  cluster_setup test-cluster 54330
  trap 'stop_test_cluster; stop_burners' EXIT
  trap 'exit 130' INT TERM
  why=
  if ! IDEM_WERROR=1 build_and_install; then
    why="the extension did not build or install"
  elif ! cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" ||
    ! cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"; then
    why="the test cluster did not start"
  fi
  if [[ -n $why ]]; then
    for s in "${cluster_suites[@]}"; do record "$s" 0 1 "not run: $why"; done
  else
    export PGHOST=$CLUSTER_SOCK PGPORT=$CLUSTER_PORT PGUSER=postgres
    SERVER_LINE="testing against PostgreSQL $(tsql -d postgres -Atc \
      "SELECT split_part(current_setting('server_version'), ' ', 1)")"
    echo "$SERVER_LINE"
    shopt -s nullglob
    wanted regress && timed run_installcheck regress regression.diffs ISOLATION= TAP_TESTS=
    wanted isolation && timed run_installcheck isolation output_iso/regression.diffs REGRESS= TAP_TESTS=
    wanted pgtap && timed run_pgtap
    scripted=()
    elsewhere=()
    for t in test/scripted/*.sh; do
      [[ -x $t ]] || continue
      [[ -z ${IDEM_SCRIPTED:-} || " $IDEM_SCRIPTED " == *" $(basename "$t" .sh) "* ]] || continue
      # A test marked "# idem: same on every major" (core fuzzing, packaging, the 15 -> 18
      # moves, the benchmark scripts, the pinned settings) or "# idem: 15 only: WHY" (a tool
      # packaged for 15 only) is run by the run against 15; another major's summary names it.
      # The reasons the others depend on the major: .ci/run's head comment.
      marker=$(sed -nE 's/^# idem: (same on every major|15 only: [^(]*).*/\1/p' "$t" | head -n1)
      if [[ ${IDEM_PG:-15} != 15 && -z ${IDEM_SCRIPTED:-} && -n $marker ]]; then
        elsewhere+=("$(basename "$t" .sh) (${marker% })")
      else
        scripted+=("$t")
      fi
    done
    if wanted scripted; then
      timed run_scripts scripted "${scripted[@]}"
      if [[ ${#elsewhere[@]} -gt 0 ]]; then
        RESULTS[-1]+="  (left to the IDEM_PG=15 run: ${elsewhere[*]})"
        echo "scripted tests left to the IDEM_PG=15 run: ${elsewhere[*]}"
      fi
    fi
    wanted examples && timed run_scripts examples examples/*/test.sh
    wanted citus && timed run_citus
    wanted clients && timed run_clients
    wanted go && timed run_go
    wanted java && timed run_java
    wanted sanitizers && timed run_sanitizers
    wanted browser && timed run_browser
    wanted brokers && timed run_brokers
    wanted jobs && timed run_jobs
    wanted docs && timed run_docs
    wanted managed && timed run_managed
    wanted monitoring && timed run_monitoring
    shopt -u nullglob
  fi
  stop_test_cluster
fi
stop_burners

wanted faults && timed run_faults
wanted packaging && timed run_packaging

echo
echo "=== summary (logs in ${LOGS#"$IDEM_ROOT"/})"
[[ -n ${SERVER_LINE:-} ]] && echo "$SERVER_LINE"
printf '%s\n' "${RESULTS[@]}"
if [[ -s $LOGS/timings ]]; then
  echo "slowest tests (seconds): $(sort -rn "$LOGS/timings" | head -n 8 | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $3, $1}')"
fi
# Where the time outside the suites went, and the setup steps inside them (summed by name).
echo "outside the suites: $((SECONDS - SUITES_SECONDS))s (packages, builds of PostgreSQL and the extension, the test cluster)"
if [[ -s $IDEM_STEP_TIMES ]]; then
  echo "setup steps (seconds, in the suite or the setup that ran them): $(awk -F'\t' '
    { s[$2] += $1; n[$2]++ }
    END { for (k in s) if (s[k] > 0) printf "%d\t%s%s\n", s[k], k, (n[k] > 1 ? " (" n[k] " times)" : "") }' \
    "$IDEM_STEP_TIMES" | sort -rn | awk -F'\t' '{ printf "%s%s %s", (NR > 1 ? "; " : ""), $2, $1 }')"
fi
echo "total ${SECONDS}s${IDEM_BUSY_CORES:+ (with $IDEM_BUSY_CORES busy cores)}"
echo "$PASSED passed, $FAILED failed" # the last line, as .ci/run reads it
[[ $FAILED -eq 0 ]]
