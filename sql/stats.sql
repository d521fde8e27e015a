-- idempotency.stats counts outcomes since stats_reset() (shared memory: the test cluster
-- preloads the library).
SELECT idempotency.stats_reset();
SELECT reserves_new, reserves_replay, completes, since IS NOT NULL AS has_since, shared_memory
FROM idempotency.stats;

-- new, complete, replay, mismatch
SELECT outcome FROM idempotency.reserve('stats_t', 'a', '\x01');
SELECT idempotency.complete('stats_t', 'a', 200, '{"ok": true}');
SELECT outcome FROM idempotency.reserve('stats_t', 'a', '\x01');
SELECT outcome FROM idempotency.reserve('stats_t', 'a', '\x02');
-- in_progress: a committed claim with a live lease
SELECT outcome FROM idempotency.reserve('stats_t', 'b', NULL, '5 min');
SELECT outcome FROM idempotency.reserve('stats_t', 'b', NULL, '5 min');
-- takeover of a lapsed claim, then fail
SELECT outcome FROM idempotency.reserve('stats_t', 'c', NULL, '1 millisecond');
SELECT pg_sleep(0.02);
SELECT outcome, attempt FROM idempotency.reserve('stats_t', 'c', NULL, '5 min');
SELECT idempotency.fail('stats_t', 'c', '{"error": "timeout"}', 2);
-- too_old: a UUIDv7 from 2023 with a 1-hour retention
SELECT outcome FROM idempotency.reserve('stats_t', '01890a5d-ac96-774b-bcce-b302099a8057',
                                        NULL, '5 min', '1 hour');
-- a refused call counts nothing
SELECT idempotency.complete('stats_t', 'nothing', 200, NULL);

SELECT reserves_new, reserves_replay, reserves_in_progress, reserves_mismatch,
       reserves_too_old, completes, fails, takeovers
FROM idempotency.stats;

SELECT idempotency.stats_reset();
SELECT reserves_new + reserves_replay + reserves_in_progress + reserves_mismatch
       + reserves_too_old + completes + fails + takeovers AS total
FROM idempotency.stats;

-- Operators need a grant.
CREATE ROLE stats_t_app;
GRANT USAGE ON SCHEMA idempotency TO stats_t_app;
SET ROLE stats_t_app;
SELECT * FROM idempotency.stats;
SELECT idempotency.stats_reset();
RESET ROLE;
REVOKE USAGE ON SCHEMA idempotency FROM stats_t_app;
DROP ROLE stats_t_app;

DELETE FROM idempotency.keys WHERE scope = 'stats_t';
