-- A claim committed by one transaction and completed in a later one (external side
-- effects): a reserve with wait > 0 polls for it without blocking the holder's complete.
-- The waiter runs in a second session through dblink.
\set VERBOSITY terse
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT dblink_connect('waiter', format('dbname=%s port=%s host=%s', current_database(),
       current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1)));

-- The holder's claim is committed; its lease is live.
SELECT outcome, attempt FROM idempotency.reserve('wait-committed', 'k');

-- completes while the waiter waits: replay
SELECT dblink_send_query('waiter', $$SELECT outcome, status_code, response
    FROM idempotency.reserve('wait-committed', 'k', wait => '10 seconds')$$);
SELECT pg_sleep(0.3);
SELECT dblink_is_busy('waiter') AS still_waiting;
SELECT idempotency.complete('wait-committed', 'k', 201, '"charged"', 1);
SELECT * FROM dblink_get_result('waiter') AS r(outcome text, status_code int, response jsonb);
SELECT * FROM dblink_get_result('waiter') AS r(outcome text, status_code int, response jsonb);

-- fails while the waiter waits: new, attempt 2
SELECT outcome, attempt FROM idempotency.reserve('wait-committed', 'k2');
SELECT dblink_send_query('waiter', $$SELECT outcome, attempt
    FROM idempotency.reserve('wait-committed', 'k2', wait => '10 seconds')$$);
SELECT pg_sleep(0.3);
SELECT idempotency.fail('wait-committed', 'k2', '"timeout"', 1);
SELECT * FROM dblink_get_result('waiter') AS r(outcome text, attempt int);
SELECT * FROM dblink_get_result('waiter') AS r(outcome text, attempt int);

-- nothing happens: in_progress once the wait is over
SELECT outcome, attempt FROM idempotency.reserve('wait-committed', 'k3');
SELECT outcome, attempt FROM dblink('waiter', $$SELECT outcome, attempt
    FROM idempotency.reserve('wait-committed', 'k3', wait => '300 milliseconds')$$)
    AS r(outcome text, attempt int);

SELECT dblink_disconnect('waiter');
