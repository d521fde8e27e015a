-- The key table has the extension's shape exactly (a dump moves between the editions): one
-- row per live (scope, key), partitioned by expires_at; (scope, key) is unique among live
-- rows because every write happens under the key's advisory lock.
CREATE TABLE idempotency.keys (
    scope text NOT NULL,
    key text NOT NULL,
    state text NOT NULL CHECK (state IN ('processing', 'completed', 'failed')),
    attempt integer NOT NULL CHECK (attempt > 0),
    request_hash bytea,
    status_code integer CHECK (status_code BETWEEN 100 AND 599),
    response jsonb,
    recovery_point text,
    last_error jsonb,
    first_seen_at timestamptz NOT NULL,
    completed_at timestamptz,
    locked_until timestamptz,
    expires_at timestamptz NOT NULL
) PARTITION BY RANGE (expires_at);
ALTER TABLE idempotency.keys REPLICA IDENTITY FULL;

CREATE TABLE idempotency.keys_default PARTITION OF idempotency.keys
    (PRIMARY KEY (key, scope, expires_at)) DEFAULT;

REVOKE ALL ON idempotency.keys, idempotency.keys_default FROM PUBLIC;
-- === key lifecycle ===

-- The live record of (scope, key) at `now`, as this transaction sees it (all NULL: none).
-- PL/pgSQL, not SQL: a SQL function that is not inlined plans its query over every partition
-- of the keys on each call (about 0.4 ms), PL/pgSQL keeps the plan for the session.
CREATE FUNCTION idempotency._live(p_scope text, p_key text, now timestamptz)
RETURNS idempotency.keys
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    r idempotency.keys;
BEGIN
    SELECT k.* INTO r FROM idempotency.keys k
    WHERE k.key OPERATOR(pg_catalog.=) p_key AND k.scope OPERATOR(pg_catalog.=) p_scope
      AND k.expires_at OPERATOR(pg_catalog.>) now
    LIMIT 1;
    RETURN r;
END
$$;

-- reserve's answer from a record (NULL: none); status_code and response only for a replay,
-- locked_until not for a completed key, nothing but the outcome for too_old.
CREATE FUNCTION idempotency._reservation(outcome idempotency.outcome, r idempotency.keys)
RETURNS idempotency.reservation
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ROW(outcome,
               CASE WHEN outcome OPERATOR(pg_catalog.=) 'replay' THEN r.status_code END,
               CASE WHEN outcome OPERATOR(pg_catalog.=) 'replay' THEN r.response END,
               r.attempt, r.recovery_point, r.first_seen_at,
               CASE WHEN r.state OPERATOR(pg_catalog.<>) 'completed' THEN r.locked_until END,
               r.expires_at)::idempotency.reservation
$$;

-- The claim of reserve and claim_once (complete_now: claim_once's record, completed by the
-- call that claims it). Every claim (new, takeover, retry after fail) sets expires_at to
-- locked_until + retention unless it is later already: a record never expires under a live
-- claim. A later expires_at moves the row to the partition of its new expiry. The key's advisory lock (a transaction lock on key_lock_id) serialises
-- every call on the key. With a wait, a live claim another transaction committed is waited
-- for without holding the lock (the holder's complete needs it): the lock is taken inside a
-- block whose subtransaction is rolled back to let it go again, and the block writes nothing.
CREATE FUNCTION idempotency._reserve(p_scope text, p_key text, p_request_hash bytea,
                                     lock_ttl_us bigint, retention_us bigint, wait_us bigint,
                                     complete_now boolean)
RETURNS idempotency.reservation
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    lock_id bigint := idempotency.key_lock_id(p_scope, p_key);
    deadline timestamptz := clock_timestamp() + make_interval(secs => wait_us / 1000000.0);
    pause_ms integer := 1;
    now timestamptz;
    r idempotency.keys;
    got boolean;
    held_before boolean;
    caller_lock_timeout text;
    left_ms bigint;
BEGIN
    IF wait_us = 0 THEN
        -- No wait: the lock tried once, with no block (and so no subtransaction) around it.
        got := pg_try_advisory_xact_lock(lock_id);
        now := clock_timestamp();
        r := idempotency._live(p_scope, p_key, now);
        IF NOT got THEN
            -- Another transaction works on the key right now; a completed record never
            -- changes, and is answered without the lock.
            IF r.key IS NOT NULL AND p_request_hash IS NOT NULL AND r.request_hash IS NOT NULL
               AND r.request_hash <> p_request_hash THEN
                RETURN idempotency._reservation('mismatch', r);
            ELSIF r.state = 'completed' THEN
                RETURN idempotency._reservation('replay', r);
            END IF;
            RETURN idempotency._reservation('in_progress', r);
        END IF;
    END IF;
    WHILE wait_us > 0 LOOP
        held_before := EXISTS (
            SELECT FROM pg_catalog.pg_locks l
            WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
              AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
              AND l.objsubid OPERATOR(pg_catalog.=) 1 AND l.granted
              AND l.classid::bigint OPERATOR(pg_catalog.=) ((lock_id >> 32) & 4294967295)
              AND l.objid::bigint OPERATOR(pg_catalog.=) (lock_id & 4294967295));
        BEGIN
            got := pg_try_advisory_xact_lock(lock_id);
            now := clock_timestamp();
            IF NOT got THEN
                -- Another transaction works on the key right now. A completed record never
                -- changes: it is answered without the lock.
                r := idempotency._live(p_scope, p_key, now);
                IF r.state = 'completed' THEN
                    RETURN idempotency._reservation(
                        CASE WHEN p_request_hash IS NOT NULL AND r.request_hash IS NOT NULL
                                  AND r.request_hash <> p_request_hash
                             THEN 'mismatch' ELSE 'replay' END::idempotency.outcome, r);
                END IF;
                IF deadline > now THEN
                    -- Wait for the lock as a lock wait (pg_locks shows it), up to the deadline
                    -- or the caller's own lock_timeout, whichever is shorter.
                    caller_lock_timeout := current_setting('lock_timeout');
                    left_ms := ceil(extract(epoch FROM deadline - now) * 1000)::bigint;
                    IF (SELECT setting::bigint FROM pg_catalog.pg_settings
                        WHERE name OPERATOR(pg_catalog.=) 'lock_timeout') BETWEEN 1 AND left_ms THEN
                        left_ms := NULL;
                    END IF;
                    BEGIN
                        IF left_ms IS NOT NULL THEN
                            PERFORM set_config('lock_timeout', least(left_ms, 2147483647)::text, true);
                        END IF;
                        PERFORM pg_advisory_xact_lock(lock_id);
                        PERFORM set_config('lock_timeout', caller_lock_timeout, true);
                        got := true;
                    EXCEPTION WHEN lock_not_available THEN
                        got := false;
                    END;
                END IF;
                IF NOT got THEN
                    IF r.key IS NOT NULL AND p_request_hash IS NOT NULL
                       AND r.request_hash IS NOT NULL AND r.request_hash <> p_request_hash THEN
                        RETURN idempotency._reservation('mismatch', r);
                    END IF;
                    RETURN idempotency._reservation('in_progress', r);
                END IF;
                now := clock_timestamp();
                held_before := false;
            END IF;
            r := idempotency._live(p_scope, p_key, now);
            IF r.key IS NOT NULL AND r.state = 'processing'
               AND NOT (p_request_hash IS NOT NULL AND r.request_hash IS NOT NULL
                        AND r.request_hash <> p_request_hash)
               AND r.locked_until > now AND wait_us > 0 AND NOT held_before
               AND deadline > clock_timestamp() THEN
                -- A live claim another transaction committed: let the lock go (with this
                -- block's subtransaction) and look again after a pause.
                RAISE EXCEPTION USING ERRCODE = 'IKW01';
            END IF;
        EXCEPTION WHEN SQLSTATE 'IKW01' THEN
            left_ms := ceil(extract(epoch FROM deadline - clock_timestamp()) * 1000)::bigint;
            PERFORM pg_sleep(greatest(least(pause_ms, left_ms), 0) / 1000.0);
            pause_ms := least(pause_ms * 2, 20);
            CONTINUE;
        END;
        EXIT;
    END LOOP;

    IF r.key IS NULL THEN
        IF idempotency.key_time(p_key) < now - make_interval(secs => retention_us / 1000000.0) THEN
            RETURN ROW('too_old', NULL, NULL, NULL, NULL, NULL, NULL, NULL)::idempotency.reservation;
        END IF;
        r := ROW(p_scope, p_key, 'processing', 1, p_request_hash, NULL, NULL, NULL, NULL, now,
                 NULL, now + make_interval(secs => lock_ttl_us / 1000000.0), NULL);
        r.expires_at := r.locked_until + make_interval(secs => retention_us / 1000000.0);
        IF complete_now THEN
            r.state := 'completed';
            r.completed_at := now;
            r.locked_until := NULL;
        END IF;
        INSERT INTO idempotency.keys SELECT r.*;
        RETURN idempotency._reservation('new', r);
    END IF;
    IF (p_request_hash IS NOT NULL AND r.request_hash IS NOT NULL AND r.request_hash <> p_request_hash)
       OR r.state = 'completed' THEN
        RETURN idempotency._reservation(
            CASE WHEN p_request_hash IS NOT NULL AND r.request_hash IS NOT NULL
                      AND r.request_hash <> p_request_hash
                 THEN 'mismatch' ELSE 'replay' END::idempotency.outcome, r);
    END IF;
    IF r.state = 'processing' AND r.locked_until > now THEN
        RETURN idempotency._reservation('in_progress', r);
    END IF;
    -- A failed claim or one whose lease lapsed: the next attempt takes it over, and its
    -- expires_at moves past the new lease (never earlier than it was).
    UPDATE idempotency.keys k
       SET state = CASE WHEN complete_now THEN 'completed' ELSE 'processing' END,
           attempt = k.attempt + 1,
           request_hash = coalesce(p_request_hash, k.request_hash),
           locked_until = CASE WHEN complete_now THEN NULL
                               ELSE now + make_interval(secs => lock_ttl_us / 1000000.0) END,
           completed_at = CASE WHEN complete_now THEN now ELSE k.completed_at END,
           expires_at = greatest(k.expires_at,
                                 now + make_interval(secs => lock_ttl_us / 1000000.0)
                                     + make_interval(secs => retention_us / 1000000.0))
     WHERE k.key = p_key AND k.scope = p_scope AND k.expires_at = r.expires_at
    RETURNING k.* INTO r;
    RETURN idempotency._reservation('new', r);
END
$$;

CREATE FUNCTION idempotency.reserve(
    scope text,
    key text,
    request_hash bytea DEFAULT NULL,
    lock_ttl interval DEFAULT '5 minutes',
    retention interval DEFAULT '24 hours',
    wait interval DEFAULT '0')
RETURNS idempotency.reservation
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    ttl_us bigint;
    retention_us bigint;
    wait_us bigint;
    now timestamptz;
    r idempotency.keys;
BEGIN
    -- The usual call (no wait, names of 1 to 255 bytes, a lease and a retention of up to 30
    -- days within max_retention unset or '30d', as a server that loads the extension shows
    -- it; READ COMMITTED, read-write) is told by one small
    -- expression, and answered here when the lock is got at once and the key is new or a
    -- replay without mismatch (as _reserve answers them, with no nested call). The full
    -- checks are large expressions, set up again in every transaction: they run only when
    -- that test fails, and raise what the extension raises. Anything else goes to _reserve,
    -- which takes the lock again (held already, or tried once more) and reads again.
    IF current_setting('transaction_isolation') = 'read committed'
       AND current_setting('transaction_read_only') = 'off'
       AND octet_length(scope) BETWEEN 1 AND 255 AND octet_length(key) BETWEEN 1 AND 255
       AND lock_ttl BETWEEN '1 microsecond' AND '30 days'
       AND retention BETWEEN '1 microsecond' AND '30 days' AND wait = '0'
       AND coalesce(nullif(current_setting('idempotency.max_retention', true), ''), '30d') = '30d' THEN
        IF pg_try_advisory_xact_lock(idempotency.key_lock_id(scope, key)) THEN
            now := clock_timestamp();
            SELECT k.* INTO r FROM idempotency.keys k
             WHERE k.key OPERATOR(pg_catalog.=) reserve.key
               AND k.scope OPERATOR(pg_catalog.=) reserve.scope AND k.expires_at > now
             LIMIT 1;
            IF r.state = 'completed' AND NOT coalesce(r.request_hash <> request_hash, false) THEN
                RETURN idempotency._reservation('replay', r);
            ELSIF r.key IS NULL THEN
                ttl_us := idempotency._usecs(lock_ttl);
                retention_us := idempotency._usecs(retention);
                IF NOT coalesce(CASE WHEN octet_length(key) IN (26, 32, 36) THEN
                        idempotency.key_time(key) < now - make_interval(secs => retention_us / 1000000.0)
                        END, false) THEN
                    r := ROW(scope, key, 'processing', 1, request_hash, NULL, NULL, NULL, NULL, now,
                             NULL, now + make_interval(secs => ttl_us / 1000000.0), NULL);
                    r.expires_at := r.locked_until + make_interval(secs => retention_us / 1000000.0);
                    INSERT INTO idempotency.keys SELECT r.*;
                    RETURN idempotency._reservation('new', r);
                END IF;
            END IF;
        END IF;
    ELSE
        -- The argument checks, in the extension's order: each raises or is true.
        ttl_us := CASE WHEN idempotency._check_writable('idempotency.reserve()')
                            AND idempotency._check_name('scope', scope)
                            AND idempotency._check_name('key', key)
                       THEN idempotency._interval_usecs('lock_ttl', lock_ttl, false) END;
        retention_us := idempotency._interval_usecs('retention', retention, false);
        wait_us := least(idempotency._interval_usecs('wait', wait, true), 3155760000000000);
        PERFORM idempotency._check_times(ttl_us, retention_us);
    END IF;
    RETURN idempotency._reserve(scope, key, request_hash, coalesce(ttl_us, idempotency._usecs(lock_ttl)),
                                coalesce(retention_us, idempotency._usecs(retention)),
                                coalesce(wait_us, 0), false);
END
$$;

CREATE FUNCTION idempotency.claim_once(
    scope text,
    key text,
    retention interval DEFAULT '24 hours',
    wait interval DEFAULT '0')
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    retention_us bigint;
    wait_us bigint;
    r idempotency.reservation;
BEGIN
    PERFORM idempotency._check_writable('idempotency.claim_once()');
    PERFORM idempotency._check_name('scope', scope);
    PERFORM idempotency._check_name('key', key);
    retention_us := idempotency._interval_usecs('retention', retention, false);
    wait_us := idempotency._interval_usecs('wait', wait, true);
    PERFORM idempotency._check_times(0, retention_us);
    r := idempotency._reserve(scope, key, NULL, 0, retention_us,
                              least(wait_us, 3155760000000000), true);
    IF r.outcome = 'new' THEN
        RETURN true;
    ELSIF r.outcome IN ('replay', 'mismatch') THEN
        RETURN false;
    ELSIF r.outcome = 'in_progress' THEN
        RAISE EXCEPTION 'idempotency key is in progress' USING ERRCODE = 'IK003',
            DETAIL = 'Another transaction holds the key: a competing consumer whose transaction '
                     'is still open, or a claim whose lease has not lapsed.',
            HINT = 'Leave the message unacknowledged (or requeue it) and retry later, or pass a '
                   'wait to wait for the holder.';
    END IF;
    RAISE EXCEPTION 'idempotency key is older than the retention window' USING ERRCODE = 'IK004',
        DETAIL = 'The key is a UUIDv7 or ULID made before now - retention: a record of its '
                 'first delivery may have expired already.',
        HINT = 'Dead-letter the message, or claim it with a longer retention.';
END
$$;

-- The live claim a complete, fail or checkpoint acts on, read under the key's lock; refused
-- when there is none or when the call's attempt is stale.
CREATE FUNCTION idempotency._claim(call text, p_scope text, p_key text, p_attempt integer)
RETURNS idempotency.keys
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    r idempotency.keys;
BEGIN
    PERFORM pg_advisory_xact_lock(idempotency.key_lock_id(p_scope, p_key));
    r := idempotency._live(p_scope, p_key, clock_timestamp());
    IF r.key IS NULL THEN
        RAISE EXCEPTION '% requires a live claim on the key', call USING ERRCODE = '55000',
            DETAIL = 'The key has no live record: it was never reserved, was forgotten, or its '
                     'retention window has ended.',
            HINT = 'Call idempotency.reserve first and act only on the outcome ''new''.';
    END IF;
    IF p_attempt IS NOT NULL AND p_attempt <> r.attempt THEN
        RAISE EXCEPTION 'attempt is stale' USING ERRCODE = 'IK001',
            DETAIL = format('The call was made for attempt %s; the key is at attempt %s.',
                            p_attempt, r.attempt),
            HINT = 'Another holder took the key over after this holder''s lock_ttl lapsed.';
    END IF;
    RETURN r;
END
$$;

CREATE FUNCTION idempotency._check_size(what text, value jsonb)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE
        WHEN pg_column_size(value) > 10485760
            THEN idempotency._raise('54000', what || ' is too large',
                format('It takes %s bytes as jsonb; the limit is 10485760 bytes.',
                       pg_column_size(value)),
                'Store a reference to the payload instead of the payload itself.')::boolean
        ELSE true END
$$;

CREATE FUNCTION idempotency.complete(
    scope text, key text, status_code integer, response jsonb, attempt integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    r idempotency.keys;
    now timestamptz;
    new_expires_at timestamptz;
    expiry_us numeric;
BEGIN
    -- The usual call told by one small expression, as reserve does; the full checks (large
    -- expressions, set up again in every transaction) only when it fails.
    IF (current_setting('transaction_isolation') = 'read committed'
        AND current_setting('transaction_read_only') = 'off'
        AND octet_length(scope) BETWEEN 1 AND 255 AND octet_length(key) BETWEEN 1 AND 255
        AND status_code BETWEEN 100 AND 599
        AND coalesce(pg_column_size(response) <= 10485760, true)) IS NOT TRUE THEN
        PERFORM idempotency._check_writable('idempotency.complete()');
        PERFORM idempotency._check_name('scope', scope);
        PERFORM idempotency._check_name('key', key);
        IF status_code IS NULL THEN
            RAISE EXCEPTION 'status_code must not be null' USING ERRCODE = '22004';
        ELSIF status_code NOT BETWEEN 100 AND 599 THEN
            RAISE EXCEPTION 'status code % is out of range (100 to 599)', status_code
                USING ERRCODE = '22023';
        END IF;
        PERFORM idempotency._check_size('response', response);
    END IF;
    -- The usual case, the holder within its lease: one UPDATE under the key's lock. Anything
    -- else (no live claim, a stale attempt, a completed or failed key, a lapsed lease) is read
    -- and answered below.
    PERFORM pg_advisory_xact_lock(idempotency.key_lock_id(scope, key));
    now := clock_timestamp();
    UPDATE idempotency.keys k
       SET state = 'completed', status_code = complete.status_code,
           response = complete.response, completed_at = now, locked_until = NULL
     WHERE k.key = complete.key AND k.scope = complete.scope AND k.expires_at > now
       AND k.state = 'processing' AND k.locked_until >= now
       AND (complete.attempt IS NULL OR k.attempt = complete.attempt);
    IF FOUND THEN
        RETURN;
    END IF;
    r := idempotency._claim('complete', scope, key, attempt);
    IF r.state = 'completed' THEN
        IF r.status_code IS DISTINCT FROM complete.status_code
           OR r.response IS DISTINCT FROM complete.response THEN
            RAISE EXCEPTION 'key is already completed with a different result'
                USING ERRCODE = 'IK002',
                DETAIL = format('The stored status_code is %s.', r.status_code);
        END IF;
        RETURN;
    ELSIF r.state = 'failed' THEN
        RAISE EXCEPTION 'complete requires a live claim on the key' USING ERRCODE = '55000',
            DETAIL = 'The last attempt failed and released its claim.',
            HINT = 'Call idempotency.reserve first and act only on the outcome ''new''.';
    END IF;
    -- A complete after the lease lapsed moves expires_at forward by as much as it came late
    -- (to the last valid timestamp at most): the answer stays replayable for the retention
    -- after it was stored. Counted in microseconds: an interval with days would shift by an
    -- hour across a daylight saving change.
    now := clock_timestamp();
    new_expires_at := r.expires_at;
    IF r.locked_until IS NOT NULL AND now > r.locked_until THEN
        expiry_us := (extract(epoch FROM r.expires_at) + extract(epoch FROM now)
                      - extract(epoch FROM r.locked_until)) * 1000000;
        new_expires_at := CASE
            WHEN expiry_us >= extract(epoch FROM '294276-12-31 23:59:59.999999+00'::timestamptz) * 1000000
                THEN '294276-12-31 23:59:59.999999+00'::timestamptz
            ELSE r.expires_at + make_interval(secs => extract(epoch FROM now - r.locked_until)) END;
    END IF;
    UPDATE idempotency.keys k
       SET state = 'completed', status_code = complete.status_code,
           response = complete.response, completed_at = now, locked_until = NULL,
           expires_at = new_expires_at
     WHERE k.key = complete.key AND k.scope = complete.scope AND k.expires_at = r.expires_at;
END
$$;

CREATE FUNCTION idempotency.fail(
    scope text, key text, error jsonb DEFAULT NULL, attempt integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    r idempotency.keys;
BEGIN
    PERFORM idempotency._check_writable('idempotency.fail()');
    PERFORM idempotency._check_name('scope', scope);
    PERFORM idempotency._check_name('key', key);
    PERFORM idempotency._check_size('error', error);
    r := idempotency._claim('fail', scope, key, attempt);
    IF r.state <> 'processing' THEN
        RAISE EXCEPTION 'fail requires a live claim on the key' USING ERRCODE = '55000',
            DETAIL = CASE WHEN r.state = 'completed' THEN 'The key is already completed.'
                          ELSE 'The claim was already released.' END,
            HINT = 'Call idempotency.reserve first and act only on the outcome ''new''.';
    END IF;
    UPDATE idempotency.keys k
       SET state = 'failed', last_error = fail.error, locked_until = NULL
     WHERE k.key = fail.key AND k.scope = fail.scope AND k.expires_at = r.expires_at;
END
$$;

CREATE FUNCTION idempotency.checkpoint(
    scope text, key text, recovery_point text, attempt integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    r idempotency.keys;
BEGIN
    PERFORM idempotency._check_writable('idempotency.checkpoint()');
    PERFORM idempotency._check_name('scope', scope);
    PERFORM idempotency._check_name('key', key);
    r := idempotency._claim('checkpoint', scope, key, attempt);
    IF r.state <> 'processing' THEN
        RAISE EXCEPTION 'checkpoint requires a live claim on the key' USING ERRCODE = '55000',
            DETAIL = 'The key is not being processed.',
            HINT = 'Call idempotency.reserve first and act only on the outcome ''new''.';
    END IF;
    UPDATE idempotency.keys k
       SET recovery_point = checkpoint.recovery_point
     WHERE k.key = checkpoint.key AND k.scope = checkpoint.scope AND k.expires_at = r.expires_at;
END
$$;

CREATE FUNCTION idempotency.lookup(scope text, key text)
RETURNS TABLE (
    state text,
    status_code integer,
    response jsonb,
    request_hash bytea,
    attempt integer,
    recovery_point text,
    last_error jsonb,
    first_seen_at timestamptz,
    completed_at timestamptz,
    locked_until timestamptz,
    expires_at timestamptz)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    r idempotency.keys;
BEGIN
    PERFORM idempotency._check_name('scope', scope);
    PERFORM idempotency._check_name('key', key);
    r := idempotency._live(scope, key, clock_timestamp());
    IF r.key IS NOT NULL THEN
        RETURN QUERY SELECT r.state, r.status_code, r.response, r.request_hash, r.attempt,
                            r.recovery_point, r.last_error, r.first_seen_at, r.completed_at,
                            r.locked_until, r.expires_at;
    END IF;
END
$$;

CREATE FUNCTION idempotency.forget(scope text, key text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    live boolean;
BEGIN
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute idempotency.forget() in a read-only transaction'
            USING ERRCODE = '25006';
    END IF;
    PERFORM idempotency._check_name('scope', scope);
    PERFORM idempotency._check_name('key', key);
    PERFORM pg_advisory_xact_lock(idempotency.key_lock_id(scope, key));
    live := (idempotency._live(scope, key, clock_timestamp())).key IS NOT NULL;
    DELETE FROM idempotency.keys k WHERE k.key = forget.key AND k.scope = forget.scope;
    RETURN live;
END
$$;

-- Only roles granted EXECUTE (docs/operations.md, "Roles and privileges") may touch keys.
REVOKE ALL ON FUNCTION
    idempotency.reserve(text, text, bytea, interval, interval, interval),
    idempotency.complete(text, text, integer, jsonb, integer),
    idempotency.fail(text, text, jsonb, integer),
    idempotency.checkpoint(text, text, text, integer),
    idempotency.claim_once(text, text, interval, interval),
    idempotency.lookup(text, text),
    idempotency.forget(text, text)
FROM PUBLIC;
-- The helpers are internal: only the edition's own functions (running as its owner) call them.
REVOKE ALL ON FUNCTION
    idempotency._check_name(text, text),
    idempotency._interval_usecs(text, interval, boolean),
    idempotency._usecs(interval),
    idempotency._setting_usecs(text, text),
    idempotency._setting_parse(text, text),
    idempotency._duration_usecs(text),
    idempotency._check_times(bigint, bigint),
    idempotency._check_writable(text),
    idempotency._canonical(jsonb, text[]),
    idempotency._live(text, text, timestamptz),
    idempotency._reservation(idempotency.outcome, idempotency.keys),
    idempotency._reserve(text, text, bytea, bigint, bigint, bigint, boolean),
    idempotency._claim(text, text, text, integer),
    idempotency._check_size(text, jsonb)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idempotency._canonical(jsonb, text[]),
    idempotency._check_name(text, text) TO PUBLIC;
