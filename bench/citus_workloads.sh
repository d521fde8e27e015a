# shellcheck shell=bash
# The pgbench scripts of the Citus comparison, shared by bench/citus.sh and
# bench/citus_profile.sh: the extension and the hand-written pattern (a table `fortress`
# distributed by tenant, co-located with `orders`), tenant and key as bound parameters.
pick_tenant() { # pick_tenant TENANT...: pgbench lines that set :t to one of them at random
  local i=0 t
  echo "\\set ti random(0, $(($# - 1)))"
  for t in "$@"; do
    if [[ $i -eq 0 ]]; then echo "\\if :ti = 0"; else echo "\\elif :ti = $i"; fi
    echo "\\set t $t"
    i=$((i + 1))
  done
  echo "\\endif"
}
vs_script() { # vs_script WORKLOAD TENANT...: a pgbench script over those tenants
  local w=$1
  shift
  pick_tenant "$@"
  case $w in
    ext_new) cat <<'SQL' ;;
\set k :base + :client_id * 1000000000000 + random(1, 999999999999)
BEGIN;
SELECT outcome FROM idempotency.reserve(:t, :k, '\x01'::bytea);
INSERT INTO orders (tenant, key, amount) VALUES (:t, :k, 1);
SELECT idempotency.complete(:t, :k, 201, '{"ok": true}');
COMMIT;
SQL
    hand_new) cat <<'SQL' ;;
\set k :base + :client_id * 1000000000000 + random(1, 999999999999)
BEGIN;
INSERT INTO fortress (tenant, key, status, request_hash) VALUES (:t, :k, 'processing', '\x01')
  ON CONFLICT DO NOTHING;
INSERT INTO orders (tenant, key, amount) VALUES (:t, :k, 1);
UPDATE fortress SET status = 'completed', response = '{"ok": true}' WHERE tenant = :t AND key = :k;
COMMIT;
SQL
    ext_replay) cat <<'SQL' ;;
\set k random(0, 99)
SELECT outcome, status_code, response FROM idempotency.reserve(:t, :k, '\x01'::bytea);
SQL
    hand_locked) cat <<'SQL' ;;
\set k random(0, 99)
BEGIN;
INSERT INTO fortress (tenant, key, status, request_hash) VALUES (:t, :k, 'processing', '\x01')
  ON CONFLICT DO NOTHING;
SELECT status, request_hash, response FROM fortress WHERE tenant = :t AND key = :k FOR UPDATE;
COMMIT;
SQL
    hand_select) cat <<'SQL' ;;
\set k random(0, 99)
SELECT status, request_hash, response FROM fortress WHERE tenant = :t AND key = :k;
SQL
    ext_storm) cat <<'SQL' ;;
\set k random(1, 5)
BEGIN;
SELECT (outcome = 'new')::int AS is_new, coalesce(attempt, 0) AS attempt
  FROM idempotency.reserve(:t, 's' || :k, wait => '20 milliseconds') \gset
\if :is_new
INSERT INTO orders (tenant, key, amount) VALUES (:t, 's' || :k, :attempt);
SELECT idempotency.complete(:t, 's' || :k, 201, '{"ok": true}', :attempt);
\endif
COMMIT;
SQL
    hand_storm) cat <<'SQL' ;;
\set k random(1, 5)
BEGIN;
INSERT INTO fortress (tenant, key, status) VALUES (:t, 'h' || :k, 'processing')
  ON CONFLICT DO NOTHING;
SELECT (status = 'processing')::int AS is_new FROM fortress
  WHERE tenant = :t AND key = 'h' || :k FOR UPDATE \gset
\if :is_new
INSERT INTO orders (tenant, key, amount) VALUES (:t, 'h' || :k, 1);
UPDATE fortress SET status = 'completed', response = '{"ok": true}'
  WHERE tenant = :t AND key = 'h' || :k;
\endif
COMMIT;
SQL
  esac
}
replay_keys() { # replay_keys TENANT...: SQL completing keys 0..99 of each tenant
  local t k
  for t in "$@"; do
    for k in $(seq 0 99); do
      echo "SELECT outcome FROM idempotency.reserve('$t', '$k', '\\x01'::bytea);"
      echo "SELECT idempotency.complete('$t', '$k', 201, '{\"ok\": true}');"
    done
  done
}
