-- fingerprint() against every shared vector of test/vectors/fingerprint.jsonl (the clients
-- check themselves against the same file). pg_regress runs psql from the repository root.
\set VERBOSITY terse
CREATE TEMP TABLE vector_lines (line text);
-- One line per row, untouched: no character of the file is a CSV quote or delimiter.
\copy vector_lines FROM 'test/vectors/fingerprint.jsonl' WITH (FORMAT csv, QUOTE E'\x01', DELIMITER E'\x02')
CREATE TEMP TABLE vectors AS SELECT line::jsonb AS v FROM vector_lines;

-- The digest in hex, or 'error ' and the SQLSTATE, of fingerprint(json::jsonb, exclude).
CREATE FUNCTION pg_temp.run(v jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RETURN encode(idempotency.fingerprint((v ->> 'json')::jsonb,
                  ARRAY(SELECT jsonb_array_elements_text(v -> 'exclude'))), 'hex');
EXCEPTION WHEN OTHERS THEN
    RETURN 'error ' || SQLSTATE;
END $$;

CREATE TEMP TABLE results AS
SELECT v ->> 'name' AS name, pg_temp.run(v) AS got,
       coalesce(v ->> 'sha256', 'error ' || (v ->> 'error')) AS want,
       v ? 'sha256' AND encode(sha256(convert_to(v ->> 'canonical', 'UTF8')), 'hex') = v ->> 'sha256'
           AS canonical_hashes_to_sha256,
       v
FROM vectors;

-- Every vector is read (the count changes only with the file), names are unique.
SELECT count(*) AS vectors, count(*) FILTER (WHERE v ? 'error') AS error_vectors,
       count(DISTINCT name) AS distinct_names
FROM results;
-- No vector disagrees (no rows).
SELECT name, got, want FROM results WHERE got IS DISTINCT FROM want ORDER BY name;
-- Each success vector's canonical form is what it claims to hash (no rows).
SELECT name FROM results WHERE v ? 'sha256' AND NOT canonical_hashes_to_sha256 ORDER BY name;
-- The order jsonb prints members in (shorter keys first) is not the canonical order.
SELECT v ->> 'json' AS json, (v ->> 'json')::jsonb::text AS jsonb_text, v ->> 'canonical' AS canonical
FROM results WHERE name = 'order/bytes-not-length-first';
