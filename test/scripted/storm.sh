#!/usr/bin/env bash
# Storm: CLIENTS (32) pgbench clients hammer NKEYS (50) keys for DURATION (20) seconds with
# three kinds of request, picked at random:
#   70% same transaction:  reserve; if new: business INSERT + complete; COMMIT
#   10% transient failure: reserve (wait 0); if new: fail (releases the claim); COMMIT
#   20% two transactions:  reserve (claim committed); then business INSERT + checkpoint +
#                          complete(attempt) in a second transaction
# (reserve waits up to 20 ms for a live holder, except in the second kind).
# Pass: pgbench ends with no aborted client and no failed transaction (any error other than
# the documented outcomes fails it), no deadlock was detected, every key is completed with
# exactly one business row (the business table has no unique index), no claim or advisory
# lock is left behind.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/storm 54443
CLIENTS=${CLIENTS:-32}
NKEYS=${NKEYS:-50}
# Keys are per generation: every 1/GENERATIONS_PER_SECOND s the 50 keys are fresh, so the
# storm keeps contending for new claims during the whole run instead of replaying.
GENERATIONS_PER_SECOND=${GENERATIONS_PER_SECOND:-5}
DURATION=${DURATION:-20}
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
WORK=$(mktemp -d /tmp/idem-storm.XXXXXX)

source "$(dirname "${BASH_SOURCE[0]}")/lib/storm_shape.sh"

cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "max_connections = $((CLIENTS + 20))" \
  "deadlock_timeout = 100ms" "log_lock_waits = on"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
q -q -c "CREATE EXTENSION idempotency"
storm_tables
storm_script
storm_run "$CLUSTER_SOCK" "$CLUSTER_PORT"
storm_check
