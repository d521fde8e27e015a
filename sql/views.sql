-- Operator views: claims in flight, abandoned claims.
SELECT outcome FROM idempotency.reserve('views_t', 'working', NULL, '5 min');
SELECT idempotency.checkpoint('views_t', 'working', 'step-2', 1);
SELECT outcome FROM idempotency.reserve('views_t', 'crashed', NULL, '1 millisecond');
SELECT outcome FROM idempotency.reserve('views_t', 'done');
SELECT idempotency.complete('views_t', 'done', 201, NULL);
SELECT outcome FROM idempotency.reserve('views_t', 'released');
SELECT idempotency.fail('views_t', 'released');
SELECT pg_sleep(0.02);

SELECT key, attempt, recovery_point, locked_until > now() AS live
FROM idempotency.in_flight WHERE scope = 'views_t' ORDER BY key;
SELECT key, attempt, recovery_point, locked_until <= now() AS lapsed
FROM idempotency.abandoned WHERE scope = 'views_t' ORDER BY key;

-- A takeover moves the abandoned claim back in flight.
SELECT outcome, attempt FROM idempotency.reserve('views_t', 'crashed', NULL, '5 min');
SELECT key, attempt FROM idempotency.in_flight WHERE scope = 'views_t' ORDER BY key;
SELECT count(*) FROM idempotency.abandoned WHERE scope = 'views_t';

-- An expired claim is in neither view.
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, locked_until, expires_at)
VALUES ('views_t', 'gone', 'processing', 1, now() - interval '2 days',
        now() - interval '2 days', now() - interval '1 day');
SELECT count(*) FROM idempotency.abandoned WHERE scope = 'views_t' AND key = 'gone';

-- Operators need a grant.
CREATE ROLE views_t_app;
GRANT USAGE ON SCHEMA idempotency TO views_t_app;
SET ROLE views_t_app;
SELECT * FROM idempotency.in_flight;
SELECT * FROM idempotency.abandoned;
RESET ROLE;
REVOKE USAGE ON SCHEMA idempotency FROM views_t_app;
DROP ROLE views_t_app;

DELETE FROM idempotency.keys WHERE scope = 'views_t';

-- The partitions view reads bounds right whatever the session's DateStyle and TimeZone
-- (printed in SQL style, Asia/Kolkata's IST would read back as Israel's).
CREATE TABLE idempotency.views_t_part PARTITION OF idempotency.keys
    FOR VALUES FROM ('2019-06-01 00:00+00') TO ('2019-06-02 00:00+00');
SET TimeZone = 'Asia/Kolkata';
SET DateStyle = 'SQL, DMY';
SELECT range_start = '2019-06-01 00:00+00' AS start_ok, range_end = '2019-06-02 00:00+00' AS end_ok,
       due_to_drop
FROM idempotency.partitions WHERE partition = 'views_t_part';
RESET TimeZone;
RESET DateStyle;
DROP TABLE idempotency.views_t_part;
