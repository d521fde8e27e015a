-- Retention counts from the end of the lease: a record is never absent while a live claim on
-- it is held, and a completed answer is replayable for at least the retention after it was
-- stored. Every claim (new, takeover, retry after fail) sets expires_at to locked_until +
-- retention unless it is later already; a complete after the lease lapsed moves it forward by
-- as much as it came late.
\set VERBOSITY terse
\i sql/include/try.sql

-- 1. A new claim: expires_at is locked_until + retention; complete within the lease keeps it.
SELECT outcome, expires_at = locked_until + interval '1 hour' AS from_lease_end,
       locked_until - first_seen_at AS lease
  FROM idempotency.reserve('expiry', 'new', lock_ttl => '10 minutes', retention => '1 hour');
CREATE TEMP TABLE before AS SELECT * FROM idempotency.lookup('expiry', 'new');
SELECT idempotency.complete('expiry', 'new', 201, '{"id": 1}', 1);
SELECT l.state, l.expires_at = b.expires_at AS kept, l.expires_at >= l.completed_at + interval '1 hour' AS replayable
  FROM idempotency.lookup('expiry', 'new') l, before b;
DROP TABLE before;
-- The same in one transaction (the claim kept in memory until complete).
BEGIN;
SELECT outcome FROM idempotency.reserve('expiry', 'one-tx', lock_ttl => '1 minute', retention => '2 hours');
SELECT idempotency.complete('expiry', 'one-tx', 200, '"done"');
COMMIT;
SELECT state, expires_at - first_seen_at AS lives FROM idempotency.lookup('expiry', 'one-tx');

-- 2. A takeover near the end of the window: the old record (lease lapsed, 30 seconds of
-- retention left) gets a lease that ends after the old expires_at; expires_at moves past it.
INSERT INTO idempotency.keys (scope, key, state, attempt, recovery_point, first_seen_at,
                              locked_until, expires_at)
VALUES ('expiry', 'late', 'processing', 1, 'charged?', now() - interval '1 day',
        clock_timestamp() - interval '1 minute', clock_timestamp() + interval '30 seconds');
SELECT outcome, attempt, recovery_point,
       expires_at = locked_until + interval '72 hours' AS from_lease_end,
       locked_until > clock_timestamp() + interval '9 minutes' AS leased
  FROM idempotency.reserve('expiry', 'late', lock_ttl => '10 minutes', retention => '3 days');
SELECT state, attempt, expires_at > now() + interval '72 hours' AS moved
  FROM idempotency.lookup('expiry', 'late');
-- One row: the update moved it (the old version is gone, not left beside the new one).
SELECT count(*) FROM idempotency.keys WHERE scope = 'expiry' AND key = 'late';
SELECT idempotency.complete('expiry', 'late', 200, '{"charged": "once"}', 2);
SELECT outcome, status_code, response FROM idempotency.reserve('expiry', 'late');

-- A takeover never shortens expires_at: a record kept longer than the new claim asks.
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, locked_until, expires_at)
VALUES ('expiry', 'long', 'processing', 1, now(), clock_timestamp() - interval '1 second',
        clock_timestamp() + interval '20 days');
CREATE TEMP TABLE before AS SELECT * FROM idempotency.lookup('expiry', 'long');
SELECT outcome, attempt FROM idempotency.reserve('expiry', 'long', lock_ttl => '1 minute', retention => '1 hour');
SELECT l.expires_at = b.expires_at AS kept FROM idempotency.lookup('expiry', 'long') l, before b;
DROP TABLE before;

-- 3. A retry after fail near the end of the window: the same.
INSERT INTO idempotency.keys (scope, key, state, attempt, last_error, first_seen_at, expires_at)
VALUES ('expiry', 'failed', 'failed', 3, '{"error": "timeout"}', now() - interval '1 day',
        clock_timestamp() + interval '5 seconds');
SELECT outcome, attempt, expires_at = locked_until + interval '24 hours' AS from_lease_end
  FROM idempotency.reserve('expiry', 'failed', lock_ttl => '1 hour', retention => '1 day');
-- claim_once has no lease: the retention counts from the call.
SELECT idempotency.claim_once('expiry', 'failed-once', retention => '2 hours');
SELECT expires_at - completed_at AS lives FROM idempotency.lookup('expiry', 'failed-once');

-- 4. A complete after the lease lapsed (no one took over): expires_at moves forward by as
-- much as the complete came late, so the answer stays for the retention after it.
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, locked_until, expires_at)
VALUES ('expiry', 'late-complete', 'processing', 1, now() - interval '1 hour',
        clock_timestamp() - interval '10 minutes', clock_timestamp() + interval '50 minutes');
CREATE TEMP TABLE before AS SELECT * FROM idempotency.lookup('expiry', 'late-complete');
SELECT idempotency.complete('expiry', 'late-complete', 200, '"late"', 1);
SELECT l.state, l.locked_until, l.expires_at - b.expires_at = l.completed_at - b.locked_until AS moved_by_lateness,
       l.expires_at - l.completed_at = b.expires_at - b.locked_until AS same_window_after_complete
  FROM idempotency.lookup('expiry', 'late-complete') l, before b;
DROP TABLE before;
-- fail and checkpoint leave expires_at alone.
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, locked_until, expires_at)
VALUES ('expiry', 'late-fail', 'processing', 1, now(), clock_timestamp() - interval '10 minutes',
        clock_timestamp() + interval '50 minutes');
CREATE TEMP TABLE before AS SELECT * FROM idempotency.lookup('expiry', 'late-fail');
SELECT idempotency.checkpoint('expiry', 'late-fail', 'step-1', 1);
SELECT idempotency.fail('expiry', 'late-fail', NULL, 1);
SELECT l.state, l.expires_at = b.expires_at AS kept FROM idempotency.lookup('expiry', 'late-fail') l, before b;
DROP TABLE before;

-- 5. The same through SPI instead of the direct path.
SET idempotency.direct_storage = off;
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, locked_until, expires_at)
VALUES ('expiry', 'late-spi', 'processing', 1, now() - interval '1 day',
        clock_timestamp() - interval '1 minute', clock_timestamp() + interval '30 seconds');
SELECT outcome, attempt, expires_at = locked_until + interval '72 hours' AS from_lease_end
  FROM idempotency.reserve('expiry', 'late-spi', lock_ttl => '10 minutes', retention => '3 days');
SELECT idempotency.complete('expiry', 'late-spi', 200, '"spi"', 2);
SELECT state, attempt, expires_at > now() + interval '72 hours' AS moved
  FROM idempotency.lookup('expiry', 'late-spi');
SELECT count(*) FROM idempotency.keys WHERE scope = 'expiry' AND key = 'late-spi';
RESET idempotency.direct_storage;

-- 6. The lease and the retention together must end before the last valid timestamp.
SELECT pg_temp.try(format($$SELECT idempotency.reserve('expiry', 'far', lock_ttl => %L,
                                                       retention => '30 days')$$,
                          timestamptz '294276-12-20 00:00+00' - clock_timestamp()));
SELECT count(*) FROM idempotency.keys WHERE scope = 'expiry' AND key = 'far';

SELECT idempotency.forget('expiry', k)
  FROM unnest(ARRAY['new', 'one-tx', 'late', 'long', 'failed', 'failed-once', 'late-complete',
                    'late-fail', 'late-spi']) AS k;
