-- Fingerprints, UUIDv7 and key times.
\set VERBOSITY terse

-- Bodies equal as jsonb hash equal, whatever their text: order, spacing, number forms.
SELECT idempotency.fingerprint('{"b": [1, 2.50, {"y": null, "x": true}], "a": "é"}'::jsonb)
     = idempotency.fingerprint('{ "a":"\u00e9", "b":[1.0,2.5,{"x":true,"y":null}] }'::jsonb) AS equal;
SELECT idempotency.fingerprint('{"a": 1}'::jsonb) = idempotency.fingerprint('{"a": 2}'::jsonb) AS equal;
SELECT idempotency.fingerprint('[1, 2]'::jsonb) = idempotency.fingerprint('[2, 1]'::jsonb) AS equal;
SELECT idempotency.fingerprint('"1"'::jsonb) = idempotency.fingerprint('1'::jsonb) AS equal;
SELECT idempotency.fingerprint('{"a": 1e2}'::jsonb) = idempotency.fingerprint('{"a": 100}'::jsonb) AS equal;
-- The canonical form is stable across releases: SHA-256 of {"a":1,"b":[true,null,"x"]}.
SELECT idempotency.fingerprint('{"b": [true, null, "x"], "a": 1.00}'::jsonb)
     = sha256('{"a":1,"b":[true,null,"x"]}'::bytea) AS canonical;
SELECT length(idempotency.fingerprint('{}'::jsonb)) AS bytes;

-- exclude drops top-level keys and dotted paths before hashing.
SELECT idempotency.fingerprint('{"amount": 5, "sent_at": "10:00"}'::jsonb, '{sent_at}')
     = idempotency.fingerprint('{"amount": 5, "sent_at": "10:01"}'::jsonb, '{sent_at}') AS equal;
SELECT idempotency.fingerprint('{"amount": 5, "meta": {"sent_at": 1, "id": 7}}'::jsonb, '{meta.sent_at}')
     = idempotency.fingerprint('{"amount": 5, "meta": {"id": 7}}'::jsonb) AS equal;
SELECT idempotency.fingerprint('{"amount": 5, "meta": {"sent_at": 1, "id": 7}}'::jsonb, '{meta.sent_at}')
     = idempotency.fingerprint('{"amount": 5, "meta": {"id": 8}}'::jsonb) AS equal;
SELECT idempotency.fingerprint('{"amount": 5}'::jsonb, '{missing, also.missing}')
     = idempotency.fingerprint('{"amount": 5}'::jsonb) AS equal;
SELECT idempotency.fingerprint('{"a": 1}'::jsonb, '{}') = idempotency.fingerprint('{"a": 1}'::jsonb) AS equal;
SELECT idempotency.fingerprint('{"a": 1}'::jsonb, ARRAY[NULL]::text[]);
SELECT idempotency.fingerprint('{"a": 1}'::jsonb, '{{a}}'::text[]);
SELECT idempotency.fingerprint(NULL::jsonb) IS NULL AS null_body;

-- The bytea form hashes the bytes as given.
SELECT idempotency.fingerprint('abc'::bytea) = sha256('abc'::bytea) AS equal;
SELECT encode(idempotency.fingerprint(''::bytea), 'hex');

-- uuidv7: version 7, variant 10, time of now, increasing within a session.
SELECT substr(u::text, 15, 1) AS version, substr(u::text, 20, 1) IN ('8', '9', 'a', 'b') AS variant,
       abs(extract(epoch FROM idempotency.key_time(u::text) - clock_timestamp())) < 5 AS recent
  FROM idempotency.uuidv7() AS u;
SELECT bool_and(a < b) AS increasing FROM (
    SELECT u AS a, lead(u) OVER (ORDER BY n) AS b
      FROM (SELECT n, idempotency.uuidv7() AS u FROM generate_series(1, 1000) AS n) AS s
) AS pairs WHERE b IS NOT NULL;

-- key_time: UUIDv7 (with or without hyphens, any case) and ULID; NULL for anything else.
SELECT key, idempotency.key_time(key) AT TIME ZONE 'UTC' AS created FROM (VALUES
    ('017f22e2-79b0-7cc3-98c4-dc0c0c07398f'),
    ('017F22E279B07CC398C4DC0C0C07398F'),
    ('01ARZ3NDEKTSV4RRFFQ69G5FAV'),
    ('01arz3ndektsv4rrffq69g5fav'),
    ('7ZZZZZZZZZZZZZZZZZZZZZZZZZ'),
    ('8ZZZZZZZZZZZZZZZZZZZZZZZZZ'),
    ('550e8400-e29b-41d4-a716-446655440000'),
    ('order-42'),
    ('')
) AS keys(key);
