-- Moves the test into a fresh database :own_db with the extension (its maintain() calls then
-- make no partitions that other tests expect not to exist yet); :regress_db names the one
-- to return to (\c :regress_db, then DROP DATABASE :own_db).
SELECT current_database() AS regress_db \gset
SET client_min_messages = warning;
DROP DATABASE IF EXISTS :own_db;
CREATE DATABASE :own_db;
\c :own_db
SET client_min_messages = warning;
CREATE EXTENSION idempotency;
