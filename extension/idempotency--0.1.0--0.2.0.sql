-- idempotency 0.1.0 -> 0.2.0. A fresh CREATE EXTENSION runs idempotency--0.1.0.sql and then
-- this script, so a new install and an upgraded one end with the same objects.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.2.0'" to load this file. \quit
