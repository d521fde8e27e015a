-- idempotency managed edition 0.3.0 -> 0.4.0. Run once on a database at 0.3.0, by the role
-- that installed the edition: through pg_tle (update_pg_tle.sql registers it with
-- pgtle.install_update_path, then ALTER EXTENSION idempotency UPDATE), or with
-- psql -1 -f on a database where the 0.3.0 script was run. A database updated either way ends
-- with the objects of a new install of 0.4.0 (the managed suite compares them). No psql
-- command here: pg_tle runs the text as it is.

COMMENT ON SCHEMA idempotency IS 'idempotency managed edition 0.4.0';
