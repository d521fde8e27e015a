-- idempotency 0.1.0 -> 0.2.0. A fresh CREATE EXTENSION runs idempotency--0.1.0.sql and then
-- this script, so a new install and an upgraded one end with the same objects.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.2.0'" to load this file. \quit

-- === logical replication (issue 18) ===
-- next_key's bounds are overwritten in place, which logical decoding does not carry: after a
-- move to a logical subscriber, read them on the old server and raise them on the new one.

-- Every stream's durable bound: no value above reserved_up_to was ever handed out.
CREATE FUNCTION idempotency.stream_positions()
RETURNS TABLE (stream text, block integer, reserved_up_to bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.stream::pg_catalog.text, s.block, s.reserved_up_to
    FROM idempotency.streams s ORDER BY 1
$$;

-- Raises the stream's bound to at least floor (never lowers it): next_key then returns values
-- above floor. Returns the bound in force afterwards.
CREATE FUNCTION idempotency.set_stream_floor(stream text, floor bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idem_set_stream_floor' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION
    idempotency.stream_positions(),
    idempotency.set_stream_floor(text, bigint)
FROM PUBLIC;

-- A publication that would lose keys on its subscribers (partitions of idempotency.keys
-- published on their own instead of through the root; the extension's tables without every
-- operation or column) fails at CREATE / ALTER PUBLICATION. maintain() runs the same check
-- before it creates partitions.
CREATE FUNCTION idempotency.publication_guard()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'idem_publication_guard' LANGUAGE C;

CREATE EVENT TRIGGER idempotency_publication_guard ON ddl_command_end
    WHEN TAG IN ('CREATE PUBLICATION', 'ALTER PUBLICATION')
    EXECUTE FUNCTION idempotency.publication_guard();
