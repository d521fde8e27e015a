-- W3 replay: reserve of a key completed during setup (autocommit); outcome 'replay'.
\set i random(1, :w3keys)
SELECT outcome, status_code, response FROM idempotency.reserve('bench-w3', :i, idempotency.fingerprint(jsonb_build_object('amount', CAST(:i AS integer))));
