-- Registers the managed edition with pg_tle in the current database, as a member of
-- pgtle_admin (no superuser, no file on the server): then CREATE EXTENSION idempotency.
-- Run from this folder with psql:
--   psql -v ON_ERROR_STOP=1 -d DB -f install_pg_tle.sql
--   psql -d DB -c 'CREATE EXTENSION idempotency'
-- psql reads the script on the client side (\set with backquotes) and writes it into the
-- statement as a string constant (:'ext', quoted and escaped by psql): the server gets one
-- statement text, no file and no bound parameter.
\set ext `cat idempotency--0.4.0.sql`
SELECT pgtle.install_extension(
    'idempotency',
    '0.4.0',
    'Exactly-once processing: idempotency keys, stored responses and watermarks (managed edition)',
    :'ext');
