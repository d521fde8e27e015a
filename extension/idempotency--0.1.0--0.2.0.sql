-- idempotency 0.1.0 -> 0.2.0. A fresh CREATE EXTENSION runs idempotency--0.1.0.sql and then
-- this script, so a new install and an upgraded one end with the same objects.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.2.0'" to load this file. \quit

-- === Citus scale-out (issue 16) ===
-- distribute(colocate_with) shards idempotency.keys by scope with Citus, co-located with a
-- table distributed by a text tenant column, and makes reserve, complete, fail, checkpoint,
-- lookup and forget distributed functions (distribution argument scope, force_delegation),
-- so each call runs on the worker that holds the scope's shard. streams and
-- consumer_positions stay local tables of each node (README, Scale-out).
CREATE FUNCTION idempotency.distribute(colocate_with regclass)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_distribute' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION idempotency.distribute(regclass) FROM PUBLIC;
