-- The floor of the managed edition's key path: what any SQL / PL/pgSQL edition has to do for a
-- new key and a replay while keeping the product's contract, and nothing else: a SECURITY
-- DEFINER function with its search_path pinned, the key's advisory lock on key_lock_id (the
-- extension's hash), the lookup over the time partitions of the extension's key table, the
-- insert and the completing UPDATE. No argument checks, no wait, no takeover, no lease
-- arithmetic. The workloads call it with the canonical fingerprint, as W2 and W3 do. Not for
-- use: a measuring stick (bench/pages/managed.md, "The floor").
--
--   psql -U <the edition's owner> -d <the edition's database> -f bench/managed_floor.sql
--   sed 's/idempotency.reserve(/idempotency.reserve_floor(/; s/idempotency.complete(/idempotency.complete_floor(/' \
--     bench/workloads/w2_extension.sql > m2_floor.sql     (likewise w3_replay.sql > m3_floor.sql)
--   pgbench -n -M prepared -c 8 -j 2 -T 5 -D run=$RANDOM -D n=0 -D w3keys=N -f m2_floor.sql ...
CREATE FUNCTION idempotency.reserve_floor(scope text, key text, request_hash bytea)
RETURNS idempotency.reservation
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    now timestamptz := clock_timestamp();
    r idempotency.keys;
BEGIN
    PERFORM pg_advisory_xact_lock(idempotency.key_lock_id(scope, key));
    SELECT k.* INTO r FROM idempotency.keys k
     WHERE k.key = reserve_floor.key AND k.scope = reserve_floor.scope AND k.expires_at > now
     LIMIT 1;
    IF r.key IS NULL THEN
        INSERT INTO idempotency.keys (scope, key, state, attempt, request_hash, first_seen_at,
                                      locked_until, expires_at)
        VALUES (scope, key, 'processing', 1, request_hash, now, now + interval '5 minutes',
                now + interval '5 minutes' + interval '24 hours');
        RETURN ROW('new', NULL, NULL, 1, NULL, now, now + interval '5 minutes',
                   now + interval '5 minutes' + interval '24 hours')::idempotency.reservation;
    END IF;
    RETURN ROW('replay', r.status_code, r.response, r.attempt, NULL, r.first_seen_at, NULL,
               r.expires_at)::idempotency.reservation;
END
$$;

CREATE FUNCTION idempotency.complete_floor(scope text, key text, status_code integer,
                                           response jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    now timestamptz := clock_timestamp();
BEGIN
    PERFORM pg_advisory_xact_lock(idempotency.key_lock_id(scope, key));
    UPDATE idempotency.keys k
       SET state = 'completed', status_code = complete_floor.status_code,
           response = complete_floor.response, completed_at = now, locked_until = NULL
     WHERE k.key = complete_floor.key AND k.scope = complete_floor.scope
       AND k.expires_at > now AND k.state = 'processing';
END
$$;
