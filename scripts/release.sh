#!/usr/bin/env bash
# One release command: checks that every version marker of the tree agrees, then writes the
# packages users install into build/dist/ (or --out DIR) with their SHA-256 sums:
#   postgresql-<major>-idempotency_<version>-<rev>_<arch>.deb   (dpkg-buildpackage -b, per major
#                                                  the build host has; its build runs the
#                                                  regression suite against the package)
#   idempotency-<version>.zip                      (make dist: the PGXN release of HEAD)
#   pg_idempotency-<version>-py3-none-any.whl, pg-idempotency-<version>.tar.gz
#                                                  (python3 -m build --no-isolation)
#   idempotency-client-<version>.tgz               (npm pack)
#   idempotency-client-<version>.jar, .pom         (mvn package, offline against Debian's
#                                                  Maven repository: the Java client)
#   goproxy/                                       (the Go modules clients/go and
#                                                  clients/go/pgxv4 at v<version>, as a
#                                                  GOPROXY=file:// tree)
#   SHA256SUMS
# and prints the git tags that publish the Go modules (clients/go/v<version>,
# clients/go/pgxv4/v<version>); --tag creates them on HEAD.
#
#   bash scripts/release.sh            check, then build everything
#   bash scripts/release.sh --check    only the check (exit 1 naming each file that disagrees)
#   bash scripts/release.sh --out DIR  the artifacts into DIR
#   bash scripts/release.sh --tag      also create the Go modules' tags
# The version is idempotency.control's default_version; the packages are built from whatever
# version the tree declares (an unreleased one included). The .deb, the wheel, the sdist and the
# npm tarball are built from the files git knows in the working tree (tracked, or new and not
# ignored), the zip from HEAD (git archive). Needs Debian's postgresql-server-dev-all,
# debhelper, python3-build, npm, maven and its plugins (the packaging and java suites of
# scripts/test.sh install them).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/build/dist
CHECK_ONLY=0
TAG=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --check) CHECK_ONLY=1 ;;
    --out) OUT=$2; shift ;;
    --tag) TAG=1 ;;
    *) echo "usage: release.sh [--check] [--out DIR] [--tag]" >&2; exit 2 ;;
  esac
  shift
done

# ---- the check ------------------------------------------------------------------------------
VERSION=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" "$ROOT/idempotency.control")
PROBLEMS=()
problem() { PROBLEMS+=("$1: $2"); }
# expect FILE WHAT FOUND: FOUND must be the version.
expect() {
  if [[ $3 != "$VERSION" ]]; then problem "$1" "$2 is '${3:-(none)}', not $VERSION"; fi
}
if [[ ! $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "idempotency.control: default_version '${VERSION:-(none)}' is not a version X.Y.Z" >&2
  exit 1
fi

json() { # json FILE PYTHON-EXPRESSION-OF-d
  /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null || true
}
expect META.json "version" "$(json "$ROOT/META.json" 'd["version"]')"
expect META.json "provides.idempotency.version" \
  "$(json "$ROOT/META.json" 'd["provides"]["idempotency"]["version"]')"
expect CHANGELOG.md "the first version heading" \
  "$(sed -nE 's/^## ([0-9][^ ]*).*/\1/p' "$ROOT/CHANGELOG.md" | head -n1)"
expect debian/changelog "the upstream version of the first entry" \
  "$(sed -nE '1s/^[^ ]+ \(([^-)]+)(-[^)]*)?\).*/\1/p' "$ROOT/debian/changelog")"
# The install script of a new version is the chain: 0.1.0's script and one upgrade script a
# step; the last one must reach the version.
last_upgrade=$(find "$ROOT/extension" -name 'idempotency--*--*.sql' -printf '%f\n' |
  sed -E 's/^idempotency--[^-]+--(.*)\.sql$/\1/' | sort -V | tail -n1)
if [[ $last_upgrade != "$VERSION" && ! -f $ROOT/extension/idempotency--$VERSION.sql ]]; then
  problem "extension/idempotency--*--$VERSION.sql" \
    "no upgrade script reaches $VERSION (the last reaches ${last_upgrade:-nothing})"
fi
expect clients/python/pyproject.toml "version" \
  "$(sed -nE 's/^version = "(.*)"$/\1/p' "$ROOT/clients/python/pyproject.toml")"
expect clients/python/pg_idempotency/versions.py "CLIENT_VERSION" \
  "$(sed -nE 's/^CLIENT_VERSION = "(.*)"$/\1/p' "$ROOT/clients/python/pg_idempotency/versions.py")"
expect clients/python/pg_idempotency/versions.py "the newest of EXTENSION_VERSIONS" \
  "$(sed -nE 's/^EXTENSION_VERSIONS = \(".*", "(.*)"\)$/\1/p' "$ROOT/clients/python/pg_idempotency/versions.py")"
expect clients/node/package.json "version" "$(json "$ROOT/clients/node/package.json" 'd["version"]')"
expect clients/node/package-lock.json "the package's version" \
  "$(json "$ROOT/clients/node/package-lock.json" 'd["packages"][""]["version"]')"
expect clients/node/lib/versions.js "CLIENT_VERSION" \
  "$(sed -nE "s/^export const CLIENT_VERSION = '(.*)';$/\1/p" "$ROOT/clients/node/lib/versions.js")"
expect clients/node/lib/versions.js "the newest of EXTENSION_VERSIONS" \
  "$(sed -nE "s/^export const EXTENSION_VERSIONS = Object.freeze\(\['.*', '(.*)'\]\);$/\1/p" "$ROOT/clients/node/lib/versions.js")"
expect clients/java/pom.xml "the project's version" \
  "$(sed -nE '0,/<artifactId>idempotency-client<\/artifactId>/d; s#^  <version>(.*)</version>$#\1#p' "$ROOT/clients/java/pom.xml" | head -n1)"
GO_MODULE=github.com/pgidempotency/idempotency/clients/go
expect clients/go/pgxv4/go.mod "the version of $GO_MODULE it requires" \
  "$(sed -nE "s#^\t$GO_MODULE v([^ ]+)\$#\1#p" "$ROOT/clients/go/pgxv4/go.mod")"

if [[ ${#PROBLEMS[@]} -gt 0 ]]; then
  echo "release.sh: the version markers disagree with idempotency.control's $VERSION:" >&2
  printf '  %s\n' "${PROBLEMS[@]}" >&2
  exit 1
fi
echo "release.sh: every version marker says $VERSION"
[[ $CHECK_ONLY == 1 ]] && exit 0

# ---- the artifacts --------------------------------------------------------------------------
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/*.deb "$OUT"/*.zip "$OUT"/*.whl "$OUT"/*.tar.gz "$OUT"/*.tgz "$OUT"/*.jar \
  "$OUT"/*.pom "$OUT"/SHA256SUMS
rm -rf "$OUT/goproxy"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idem-release.XXXXXX")
# The package build's regression run starts a server as the postgres user: it reads the tree.
chmod 755 "$WORK"
trap 'rm -rf "$WORK"' EXIT

# export DIR: the files git knows in the working tree (no build products, no local clusters).
export_tree() {
  mkdir -p "$1"
  (cd "$ROOT" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$1" -xf -
}

echo "==> the Debian package (dpkg-buildpackage -us -uc -b)"
export_tree "$WORK/deb/src"
# The build's regression run (pg_virtualenv) listens on PGPORT when set.
(cd "$WORK/deb/src" && dpkg-buildpackage -us -uc -b) >"$WORK/deb/build.log" 2>&1 ||
  { tail -n 60 "$WORK/deb/build.log" >&2; echo "release.sh: dpkg-buildpackage failed" >&2; exit 1; }
cp "$WORK"/deb/postgresql-*-idempotency_*.deb "$OUT/"
[[ -z ${IDEM_RELEASE_LOGS:-} ]] || cp "$WORK/deb/build.log" "$IDEM_RELEASE_LOGS/deb-build.log"

echo "==> the PGXN zip (make dist)"
make -s -C "$ROOT" dist DIST_DIR="$OUT" ${PG_CONFIG:+PG_CONFIG="$PG_CONFIG"} >/dev/null

echo "==> the Python wheel and sdist (python3 -m build --no-isolation)"
export_tree "$WORK/py"
(cd "$WORK/py/clients/python" && /usr/bin/python3 -m build --no-isolation --outdir "$OUT" .) \
  >"$WORK/py.log" 2>&1 || { tail -n 30 "$WORK/py.log" >&2; exit 1; }

echo "==> the npm tarball (npm pack)"
export_tree "$WORK/npm"
(cd "$WORK/npm/clients/node" && npm pack --silent --pack-destination "$OUT" >/dev/null)

echo "==> the Java jar and pom (mvn package, offline)"
export_tree "$WORK/java"
(cd "$WORK/java/clients/java" && mvn -B -q -s maven-settings.xml -Dmaven.repo.local="$WORK/m2" \
  -DskipTests package) >"$WORK/java.log" 2>&1 || { tail -n 30 "$WORK/java.log" >&2; exit 1; }
cp "$WORK/java/clients/java/target/idempotency-client-$VERSION.jar" "$OUT/"
cp "$WORK/java/clients/java/pom.xml" "$OUT/idempotency-client-$VERSION.pom"

echo "==> the Go modules (a GOPROXY file tree)"
export_tree "$WORK/go"
for dir in clients/go clients/go/pgxv4; do
  /usr/bin/python3 "$ROOT/scripts/go_module_zip.py" "$OUT/goproxy" \
    "github.com/pgidempotency/idempotency/$dir" "v$VERSION" "$ROOT/$dir"
done

(cd "$OUT" && find goproxy -name '*.zip' -print0 | sort -z |
  xargs -0 sha256sum -- *.deb *.zip *.whl *.tar.gz *.tgz *.jar *.pom >SHA256SUMS)
echo "release.sh: $VERSION written to $OUT:"
sed 's/^/  /' "$OUT/SHA256SUMS"
# A Go module in a subfolder is published by a tag named after the folder.
GO_TAGS=("clients/go/v$VERSION" "clients/go/pgxv4/v$VERSION")
if [[ $TAG == 1 ]]; then
  for t in "${GO_TAGS[@]}"; do git -C "$ROOT" tag "$t"; done
  echo "release.sh: tagged HEAD ${GO_TAGS[*]}"
else
  echo "release.sh: the Go modules are published by: git tag ${GO_TAGS[0]} && git tag ${GO_TAGS[1]}"
fi
