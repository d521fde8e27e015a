#!/usr/bin/env bash
# Outbox end to end: 4 concurrent producers (pgbench) emit ledger entries while a consumer
# reads the slot in batches (framing on), applies each message under
# idempotency.accept('ledger', 'outbox', key) twice (a redelivery), sometimes "crashes" before
# acknowledging (so the next batch delivers the same messages again), and acknowledges with
# pg_replication_slot_advance to the COMMIT line's end_lsn. In the end every committed message
# has exactly one effect, and the balances match what the producers committed.
# Runs on the shared test cluster (wal_level = logical) in a database of its own.
set -euo pipefail

DB=outbox_e2e
SLOT=outbox_e2e
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" test_cluster
WORK=$(mktemp -d)
own_database "$DB"
q <<'SQL'
CREATE EXTENSION idempotency;
SELECT 'slot' FROM pg_create_logical_replication_slot('outbox_e2e', 'idempotency');

-- Producer side: what was committed (written in the same transaction as the message).
CREATE TABLE produced (id bigserial PRIMARY KEY, lsn pg_lsn NOT NULL, account int NOT NULL,
                       amount int NOT NULL);

-- Consumer side.
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO accounts SELECT g FROM generate_series(1, 10) g;
CREATE TABLE effects (id bigserial PRIMARY KEY, key uuid NOT NULL, lsn pg_lsn NOT NULL);
CREATE TABLE deliveries (n bigint NOT NULL);
INSERT INTO deliveries VALUES (0);

-- One batch: every message is applied under accept, in a transaction of its own, twice.
CREATE PROCEDURE consume(batch int, ack boolean) LANGUAGE plpgsql AS $$
DECLARE
    r record;
    done pg_lsn;
BEGIN
    FOR r IN SELECT data::jsonb AS m
             FROM pg_logical_slot_peek_changes('outbox_e2e', NULL, batch, 'framing', 'on') LOOP
        IF r.m->>'action' = 'commit' THEN
            done := (r.m->>'end_lsn')::pg_lsn;
        ELSIF r.m ? 'key' THEN
            FOR attempt IN 1..2 LOOP
                IF idempotency.accept('ledger', 'outbox', (r.m->>'key')::uuid) THEN
                    UPDATE accounts SET balance = balance + (r.m->'payload'->>'amount')::int
                    WHERE id = (r.m->'payload'->>'account')::int;
                    INSERT INTO effects (key, lsn) VALUES ((r.m->>'key')::uuid, (r.m->>'lsn')::pg_lsn);
                END IF;
                UPDATE deliveries SET n = n + 1;
                COMMIT;
            END LOOP;
        END IF;
    END LOOP;
    IF ack AND done IS NOT NULL THEN
        PERFORM pg_replication_slot_advance('outbox_e2e', done);
    END IF;
    COMMIT;
END $$;
SQL

cat >"$WORK/produce.sql" <<'SQL'
\set account random(1, 10)
\set amount random(1, 1000)
\set n random(1, 3)
INSERT INTO produced (lsn, account, amount)
SELECT idempotency.emit('ledger', jsonb_build_object('account', :account, 'amount', :amount)),
       :account, :amount
FROM generate_series(1, :n);
SQL
"$PGBIN/pgbench" -n -c 4 -j 2 -t 150 -f "$WORK/produce.sql" "$DB" >"$WORK/pgbench.log" 2>&1 &
PRODUCER_PID=$!
BG+=("$PRODUCER_PID")

batch=0
producing=1
while :; do
  batch=$((batch + 1))
  # every third batch "crashes" before acknowledging: it is delivered again
  if ((batch % 3 == 0)); then ack=false; else ack=true; fi
  q -c "CALL consume(50, $ack)"
  if ((producing)) && ! kill -0 "$PRODUCER_PID" 2>/dev/null; then
    wait "$PRODUCER_PID" || { cat "$WORK/pgbench.log"; fail "pgbench failed"; }
    PRODUCER_PID=
    producing=0
  fi
  if ((!producing)) && [[ $ack == true ]] &&
    [[ $(q -c "SELECT count(*) FROM pg_logical_slot_peek_changes('$SLOT', NULL, NULL)") -eq 0 ]]; then
    break
  fi
  ((batch < 5000)) || fail "the consumer did not catch up"
done

read -r produced effects distinct_effects deliveries balances_match lsn_match <<<"$(q -F ' ' -c "
SELECT (SELECT count(*) FROM produced),
       (SELECT count(*) FROM effects),
       (SELECT count(DISTINCT key) FROM effects),
       (SELECT n FROM deliveries),
       (SELECT bool_and(a.balance = coalesce(p.total, 0))
        FROM accounts a LEFT JOIN (SELECT account, sum(amount) AS total FROM produced GROUP BY 1) p
             ON p.account = a.id),
       (SELECT count(*) = (SELECT count(*) FROM produced)
        FROM produced p JOIN effects e ON e.lsn = p.lsn)")"
echo "batches=$batch produced=$produced effects=$effects distinct=$distinct_effects deliveries=$deliveries"
((produced >= 600)) || fail "only $produced messages produced"
((effects == produced)) || fail "$effects effects for $produced messages"
((distinct_effects == produced)) || fail "duplicate effects"
((deliveries >= 2 * produced + 2)) || fail "redeliveries did not happen ($deliveries deliveries)"
[[ $balances_match == t ]] || fail "balances differ from what was produced"
[[ $lsn_match == t ]] || fail "effects do not match the produced messages one to one"
echo "ok: $produced messages, each applied exactly once over $deliveries deliveries"
