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

-- === operations: logical backups (ops) ===
-- pg_dump writes an extension's tables as CREATE EXTENSION only, and every partition of
-- idempotency.keys made later (by maintain() or pg_partman) as a table of its own: CREATE
-- TABLE, ATTACH PARTITION, then its primary key as ALTER TABLE ONLY ... ADD CONSTRAINT. With
-- a primary key on the parent, which CREATE EXTENSION re-creates before the partitions are
-- attached, the ATTACH already gives each partition a primary key and the dump's own fails
-- ("multiple primary keys"). So the parent has none from 0.2.0 on: each partition carries its
-- own primary key (key, scope, expires_at), which is what pg_dump writes and what reserve and
-- complete use. (scope, key) never was unique across partitions through the parent's key:
-- the advisory lock makes it so.
ALTER TABLE idempotency.keys DROP CONSTRAINT keys_pkey;

DO $$
DECLARE
    part regclass;
    template text;
    partman_schema name;
BEGIN
    -- Dropping the parent's key dropped the partitions' keys attached to it: each gets its own.
    FOR part IN
        SELECT i.inhrelid::regclass FROM pg_catalog.pg_inherits i
        WHERE i.inhparent OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass
          AND NOT EXISTS (SELECT FROM pg_catalog.pg_index x
                          WHERE x.indrelid OPERATOR(pg_catalog.=) i.inhrelid AND x.indisprimary)
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE ONLY %s ADD PRIMARY KEY (key, scope, expires_at)',
                                  part);
    END LOOP;

    -- pg_partman (after use_partman()) makes partitions from its template table: the primary
    -- key goes there now.
    SELECT n.nspname INTO partman_schema
    FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname OPERATOR(pg_catalog.=) 'pg_partman';
    IF partman_schema IS NOT NULL THEN
        EXECUTE pg_catalog.format('SELECT template_table FROM %I.part_config '
                                  'WHERE parent_table OPERATOR(pg_catalog.=) $1', partman_schema)
            INTO template USING 'idempotency.keys';
        IF template IS NOT NULL AND pg_catalog.to_regclass(template) IS NOT NULL
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_index x
                           WHERE x.indrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(template)
                             AND x.indisprimary) THEN
            EXECUTE pg_catalog.format('ALTER TABLE %s ADD PRIMARY KEY (key, scope, expires_at)',
                                      pg_catalog.to_regclass(template));
        END IF;
    END IF;

    -- The default partition belongs to the extension (so CREATE EXTENSION re-creates it on
    -- restore) and its rows are dumped. 0.1.0's use_partman() replaced it with pg_partman's,
    -- which belonged to no extension (the dump's CREATE TABLE then failed: "already exists").
    part := (SELECT p.partdefid::regclass FROM pg_catalog.pg_partitioned_table p
             WHERE p.partrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass
               AND p.partdefid OPERATOR(pg_catalog.<>) 0);
    IF part IS NOT NULL THEN
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                       WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::regclass
                         AND d.objid OPERATOR(pg_catalog.=) part
                         AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::regclass
                         AND d.deptype OPERATOR(pg_catalog.=) 'e') THEN
            EXECUTE pg_catalog.format('ALTER EXTENSION idempotency ADD TABLE %s', part);
            EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM PUBLIC', part);
        END IF;
        PERFORM pg_catalog.pg_extension_config_dump(part, '');
    END IF;
END
$$;

-- === operations: clean uninstall (ops) ===
-- pg_partman keeps its configuration (part_config row, template table) by name, not by
-- dependency: DROP EXTENSION idempotency alone would leave them behind, and every
-- partman.run_maintenance() failing on the missing table. Run this first.
CREATE FUNCTION idempotency.stop_partman()
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_stop_partman' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION idempotency.stop_partman() FROM PUBLIC;
