-- Behaviour 11: an application role granted what README says ("Roles and privileges") can
-- use every function, and can neither read nor write the key table directly.
\set VERBOSITY terse
CREATE ROLE regress_idem_app LOGIN;
GRANT USAGE ON SCHEMA idempotency TO regress_idem_app;
GRANT EXECUTE ON FUNCTION
    idempotency.reserve(text, text, bytea, interval, interval, interval),
    idempotency.complete(text, text, integer, jsonb, integer),
    idempotency.fail(text, text, jsonb, integer),
    idempotency.checkpoint(text, text, text, integer),
    idempotency.claim_once(text, text, interval, interval),
    idempotency.lookup(text, text),
    idempotency.forget(text, text)
TO regress_idem_app;

SET ROLE regress_idem_app;
BEGIN;
SELECT outcome, attempt FROM idempotency.reserve('roles', 'k', idempotency.fingerprint('{"x": 1}'::jsonb));
SELECT idempotency.checkpoint('roles', 'k', 'halfway');
SELECT idempotency.complete('roles', 'k', 200, '{"ok": true}');
COMMIT;
SELECT outcome, status_code, response FROM idempotency.reserve('roles', 'k');
SELECT state, status_code FROM idempotency.lookup('roles', 'k');
SELECT outcome FROM idempotency.reserve('roles', 'k2');
SELECT idempotency.fail('roles', 'k2', '"boom"');
SELECT idempotency.forget('roles', 'k2');
SELECT idempotency.claim_once('roles', 'm1') AS applied;
SELECT idempotency.claim_once('roles', 'm1') AS applied;
SELECT length(idempotency.fingerprint('x'::bytea)), idempotency.uuidv7() IS NOT NULL AS uuid,
       idempotency.key_time('01ARZ3NDEKTSV4RRFFQ69G5FAV') IS NOT NULL AS key_time;
-- direct access is refused
SELECT count(*) FROM idempotency.keys;
SELECT count(*) FROM idempotency.keys_default;
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, expires_at)
VALUES ('roles', 'forged', 'completed', 1, now(), now() + interval '1 day');
UPDATE idempotency.keys SET status_code = 500;
DELETE FROM idempotency.keys;
RESET ROLE;

-- A role without the grants cannot call the functions that touch keys.
CREATE ROLE regress_idem_other LOGIN;
GRANT USAGE ON SCHEMA idempotency TO regress_idem_other;
SET ROLE regress_idem_other;
SELECT idempotency.reserve('roles', 'k');
SELECT idempotency.complete('roles', 'k', 200, NULL);
SELECT idempotency.claim_once('roles', 'm2');
SELECT idempotency.forget('roles', 'k');
SELECT count(*) FROM idempotency.lookup('roles', 'k');
-- fingerprints and keys touch no table and stay public
SELECT length(idempotency.fingerprint('{}'::jsonb)) AS fingerprint;
RESET ROLE;

SELECT scope, key, state FROM idempotency.keys WHERE scope = 'roles' ORDER BY key;

DROP OWNED BY regress_idem_app, regress_idem_other;
DROP ROLE regress_idem_app, regress_idem_other;
