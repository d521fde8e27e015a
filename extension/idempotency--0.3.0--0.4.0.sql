-- idempotency 0.3.0 -> 0.4.0. A new install runs 0.1.0's script and every upgrade after it,
-- so a new database and an updated one end with the same objects
-- (test/scripted/upgrade_chain.sh compares them).
\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.4.0'" to load this file. \quit
