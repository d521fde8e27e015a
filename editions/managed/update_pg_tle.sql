-- Registers with pg_tle, in the current database, the update of the managed edition from the
-- previous release, as a member of pgtle_admin: then ALTER EXTENSION idempotency UPDATE.
-- Run from this folder with psql:
--   psql -v ON_ERROR_STOP=1 -d DB -f update_pg_tle.sql
--   psql -d DB -c 'ALTER EXTENSION idempotency UPDATE'
-- psql reads the update script on the client side (\set with backquotes) and writes it into
-- the statement as a string constant (:'upd', quoted and escaped by psql); the server gets
-- one statement text, no file.
\set upd `cat idempotency--0.3.0--0.4.0.sql`
SELECT pgtle.install_update_path('idempotency', '0.3.0', '0.4.0', :'upd');
SELECT pgtle.set_default_version('idempotency', '0.4.0');
