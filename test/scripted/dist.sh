#!/usr/bin/env bash
# idem: same on every major (the IDEM_PG=15 run runs it; see scripts/test.sh)
# `make dist` makes a PGXN-ready zip: idempotency-<default_version>.zip with everything under
# one idempotency-<version>/ folder, holding every file git tracks (but CI's), among them
# LICENSE, META.json, the control file and every install and upgrade script; META.json is
# valid, of that version, with license, release_status and the minimum
# PostgreSQL version, no placeholder address, and the file it names is in the zip; LICENSE is
# the PostgreSQL licence.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" none
command -v unzip >/dev/null || apt_install unzip
git -C "$IDEM_ROOT" rev-parse --git-dir >/dev/null 2>&1 ||
  fail "$IDEM_ROOT is not a git checkout: make dist archives git's HEAD"
WORK=$(mktemp -d /tmp/idem-dist-XXXXXX)

version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$IDEM_ROOT/idempotency.control")
[[ -n $version ]] || fail "no default_version in idempotency.control"
make -s -C "$IDEM_ROOT" dist DIST_DIR="$WORK" PG_CONFIG="$PG_CONFIG" >/dev/null
zip=$WORK/idempotency-$version.zip
[[ -f $zip ]] || fail "make dist did not write $zip"
echo "ok: make dist wrote idempotency-$version.zip ($(stat -c %s "$zip") bytes)"

unzip -q "$zip" -d "$WORK/x"
[[ $(ls "$WORK/x") == "idempotency-$version" ]] || fail "the zip's top level is $(ls "$WORK/x")"
top=$WORK/x/idempotency-$version
for f in LICENSE META.json README.md CHANGELOG.md Makefile idempotency.control \
  extension/idempotency--0.1.0.sql extension/idempotency--0.1.0--0.2.0.sql \
  extension/idempotency--0.2.0--0.3.0.sql extension/idempotency--0.3.0--0.4.0.sql; do
  [[ -f $top/$f ]] || fail "$f is missing from the zip"
done
# Every tracked file of HEAD but CI's is in it.
missing=$(cd "$IDEM_ROOT" && git ls-tree -r --name-only HEAD | grep -v '^\.ci/\|^\.gitattributes$' |
  while read -r f; do [[ -e $top/$f ]] || echo "$f"; done)
[[ -z $missing ]] || fail "tracked files missing from the zip: $missing"
[[ ! -e $top/.ci ]] || fail ".ci is in the zip"
echo "ok: one top folder, every tracked file, no CI configuration"

grep -q '^PostgreSQL License$' "$top/LICENSE" && grep -q 'Permission to use, copy, modify, and distribute' "$top/LICENSE" ||
  fail "LICENSE is not the PostgreSQL licence"
perl -MJSON::PP -e '
  my ($file, $version, $top) = @ARGV;
  open my $fh, "<", $file or die "META.json: $!\n";
  my $m = JSON::PP->new->decode(do { local $/; <$fh> });
  my @errors;
  push @errors, "version $m->{version} is not $version" if $m->{version} ne $version;
  push @errors, "license is not postgresql" if ($m->{license} // "") ne "postgresql";
  push @errors, "release_status missing or invalid"
    unless ($m->{release_status} // "") =~ /^(stable|testing|unstable)$/;
  # The PGXN meta spec 1.0.0: its required keys, semantic versions, and a file and a version for
  # every extension provided.
  for my $key (qw(name abstract version maintainer license provides meta-spec)) {
    push @errors, "$key is missing (required by the PGXN meta spec)" unless defined $m->{$key};
  }
  push @errors, "version $m->{version} is not a semantic version"
    unless $m->{version} =~ /^\d+\.\d+\.\d+$/;
  # No placeholder address: a resource the project does not have is left out.
  for my $r (keys %{ $m->{resources} // {} }) {
    my $res = $m->{resources}{$r};
    for my $u (ref $res eq "HASH" ? grep { /^(url|web)$/ } keys %$res : ()) {
      push @errors, "resources.$r.$u $res->{$u} is a placeholder"
        if $res->{$u} =~ m{idempotency-pg/|example\.(com|org)};
    }
  }
  my $pg = $m->{prereqs}{runtime}{requires}{PostgreSQL} // "";
  push @errors, "minimum PostgreSQL is \"$pg\", not 15.19.0 (output_plugin_libraries)" if $pg ne "15.19.0";
  for my $name (keys %{ $m->{provides} }) {
    my $p = $m->{provides}{$name};
    push @errors, "provides.$name.version is not $version" if $p->{version} ne $version;
    push @errors, "provides.$name.file $p->{file} is not in the zip" unless -f "$top/$p->{file}";
    push @errors, "provides.$name.abstract is missing" unless $p->{abstract};
  }
  push @errors, "meta-spec is not 1.0.0" if $m->{"meta-spec"}{version} ne "1.0.0";
  die map { "META.json: $_\n" } @errors if @errors;
' "$top/META.json" "$version" "$top" || fail "META.json is not PGXN-ready"
echo "ok: LICENSE is the PostgreSQL licence; META.json is valid (PGXN meta spec 1.0.0), version $version"
echo "dist: passed"
