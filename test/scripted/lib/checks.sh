# shellcheck shell=bash
# Counted checks for scripted tests; the test defines fail() (which logs to show, then exit 1).
#   passed WHAT                  one more check passed: prints "ok: WHAT"
#   expect WHAT ACTUAL WANTED    ACTUAL must equal WANTED
# CHECKS counts them, for the test's last line.
CHECKS=0
passed() {
  CHECKS=$((CHECKS + 1))
  echo "ok: $*"
}
expect() {
  [[ $2 == "$3" ]] || fail "$1: got '$2', want '$3'"
  passed "$1"
}
