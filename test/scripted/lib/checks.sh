# shellcheck shell=bash
# Counted checks and bounded waits for scripted tests; the test defines fail() (which logs to
# show, then exit 1), or takes it from one_cluster.sh.
#   passed WHAT                  one more check passed: prints "ok: WHAT" (ok is the same)
#   expect WHAT ACTUAL WANTED    ACTUAL must equal WANTED
#   eventually SECONDS WHAT CMD...   runs CMD every 0.2 s until it succeeds, then passed WHAT;
#                                fails after SECONDS. Tests wait for a condition this way,
#                                never for a length of time (a loaded machine is slow).
#   until_true SECONDS CMD...    the same without the check: false after SECONDS
#   log_mark LOG                 the log's size now, for log_count / log_shows_within
#   log_count LOG MARK PATTERN   lines matching PATTERN (grep) written since MARK
# CHECKS counts them, for the test's last line.
CHECKS=0
passed() {
  CHECKS=$((CHECKS + 1))
  echo "ok: $*"
}
ok() { passed "$@"; }
expect() {
  [[ $2 == "$3" ]] || fail "$1: got '$2', want '$3'"
  passed "$1"
}
until_true() {
  local end=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < end)) || return 1
    sleep 0.2
  done
}
eventually() {
  local limit=$1 what=$2
  shift 2
  until_true "$limit" "$@" || fail "$what (not within ${limit}s)"
  passed "$what"
}
log_mark() { stat -c %s "$1"; }
log_count() { tail -c +"$(($2 + 1))" "$1" | grep -c -- "$3" || true; }
