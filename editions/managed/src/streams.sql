-- === monotonic keys and consumer watermarks ===

-- The extension's tables, shape for shape. A stream's keys come from a sequence of its own
-- (idempotency.next_key_<md5 of the stream>): nextval is monotonic across sessions, never
-- repeats, and is not undone by a rollback, as the extension's next_key. reserved_up_to
-- stays at the bound create_stream or set_stream_floor gave; stream_positions() reads the
-- sequence.
CREATE TABLE idempotency.streams (
    stream text COLLATE "C" PRIMARY KEY,
    block integer NOT NULL CHECK (block > 0),
    reserved_up_to bigint NOT NULL DEFAULT 0 CHECK (reserved_up_to >= 0)
);

CREATE TABLE idempotency.consumer_positions (
    consumer text COLLATE "C" NOT NULL,
    partition text COLLATE "C" NOT NULL,
    position uuid NOT NULL,
    moved_at timestamptz,
    PRIMARY KEY (consumer, partition)
) WITH (fillfactor = 70);

REVOKE ALL ON idempotency.streams, idempotency.consumer_positions FROM PUBLIC;

-- As in the extension, the rows of streams change only through create_stream, drop_stream
-- and set_stream_floor.
CREATE FUNCTION idempotency.streams_refuse_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rows of idempotency.streams cannot be updated'
        USING ERRCODE = '55000',
              HINT = 'next_key overwrites them in place; use create_stream and drop_stream.';
END
$$;

CREATE TRIGGER streams_refuse_update BEFORE UPDATE ON idempotency.streams
    FOR EACH ROW EXECUTE FUNCTION idempotency.streams_refuse_update();

-- Installed as an extension (pg_tle), pg_dump keeps the bounds, the watermarks and the keys
-- of the default partition, as it does for the extension's.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'idempotency') THEN
        PERFORM pg_catalog.pg_extension_config_dump('idempotency.streams', '');
        PERFORM pg_catalog.pg_extension_config_dump('idempotency.consumer_positions', '');
        PERFORM pg_catalog.pg_extension_config_dump('idempotency.keys_default', '');
    END IF;
END
$$;

CREATE FUNCTION idempotency._stream_sequence(stream text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT 'idempotency.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(
                 'next_key_' OPERATOR(pg_catalog.||) pg_catalog.md5(stream)) $$;

CREATE FUNCTION idempotency._check_stream(call text, stream text)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute % in a read-only transaction', call USING ERRCODE = '25006';
    END IF;
    PERFORM idempotency._check_name('stream', stream);
    RETURN idempotency._stream_sequence(stream);
END
$$;

CREATE FUNCTION idempotency.create_stream(stream text, block integer DEFAULT 1000)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq text := idempotency._check_stream('idempotency.create_stream()', stream);
BEGIN
    IF block IS NULL THEN
        RAISE EXCEPTION 'block must not be null' USING ERRCODE = '22004';
    ELSIF block < 1 THEN
        RAISE EXCEPTION 'block must be between 1 and 2147483647, not %', block
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO idempotency.streams AS s (stream, block) VALUES (create_stream.stream, block)
        ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stream "%" already exists', stream USING ERRCODE = '42710';
    END IF;
    EXECUTE format('CREATE SEQUENCE %s AS bigint MINVALUE 1 NO CYCLE', seq);
END
$$;

CREATE FUNCTION idempotency.drop_stream(stream text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq text := idempotency._check_stream('idempotency.drop_stream()', stream);
BEGIN
    DELETE FROM idempotency.streams s WHERE s.stream = drop_stream.stream;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stream "%" does not exist', stream USING ERRCODE = '42704';
    END IF;
    EXECUTE format('DROP SEQUENCE IF EXISTS %s', seq);
END
$$;

CREATE FUNCTION idempotency.next_key(stream text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq text := idempotency._check_stream('next_key()', stream);
BEGIN
    RETURN nextval(seq::regclass);
EXCEPTION
    WHEN undefined_table THEN
        RAISE EXCEPTION 'stream "%" does not exist', stream USING ERRCODE = '42704';
    WHEN sequence_generator_limit_exceeded THEN
        RAISE EXCEPTION 'stream "%" has reached its maximum value', stream USING ERRCODE = '2200H';
END
$$;

CREATE FUNCTION idempotency.stream_positions()
RETURNS TABLE (stream text, block integer, reserved_up_to bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
    last bigint;
BEGIN
    FOR s IN SELECT * FROM idempotency.streams ORDER BY 1 LOOP
        EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM %s',
                       idempotency._stream_sequence(s.stream)) INTO last;
        stream := s.stream;
        block := s.block;
        reserved_up_to := greatest(s.reserved_up_to, last);
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE FUNCTION idempotency.set_stream_floor(stream text, floor bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq text := idempotency._check_stream('idempotency.set_stream_floor()', stream);
    last bigint;
BEGIN
    IF floor IS NULL THEN
        RAISE EXCEPTION 'floor must not be null' USING ERRCODE = '22004';
    ELSIF floor < 0 THEN
        RAISE EXCEPTION 'floor must not be negative' USING ERRCODE = '22023',
            DETAIL = format('The floor was %s.', floor);
    END IF;
    PERFORM FROM idempotency.streams s WHERE s.stream = set_stream_floor.stream FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stream "%" does not exist', stream USING ERRCODE = '42704';
    END IF;
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM %s',
                   seq) INTO last;
    IF floor > last THEN
        PERFORM setval(seq::regclass, floor, true);
        last := floor;
    END IF;
    RETURN last;
END
$$;

-- A bigint position as the 128-bit big-endian uuid the watermark is stored as.
CREATE FUNCTION idempotency._position(p bigint)
RETURNS uuid
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF p IS NULL THEN
        RAISE EXCEPTION 'position must not be null' USING ERRCODE = '22004';
    ELSIF p < 0 THEN
        RAISE EXCEPTION 'position must not be negative, not %', p USING ERRCODE = '22023';
    END IF;
    RETURN ('0000000000000000' || lpad(to_hex(p), 16, '0'))::uuid;
END
$$;

CREATE FUNCTION idempotency.position_numeric("position" uuid)
RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (CASE WHEN h.hi < 0 THEN h.hi::numeric + 18446744073709551616 ELSE h.hi END)
           * 18446744073709551616
           + (CASE WHEN h.lo < 0 THEN h.lo::numeric + 18446744073709551616 ELSE h.lo END)
    FROM (SELECT ('x' || substr(x.hex, 1, 16))::bit(64)::bigint AS hi,
                 ('x' || substr(x.hex, 17, 16))::bit(64)::bigint AS lo
          FROM (SELECT replace("position"::text, '-', '') AS hex) x) h
$$;

CREATE FUNCTION idempotency._accept(call text, p_consumer text, p_partition text, p uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute % in a read-only transaction', call USING ERRCODE = '25006';
    END IF;
    UPDATE idempotency.consumer_positions w SET position = p, moved_at = now()
     WHERE w.consumer = p_consumer AND w.partition = p_partition AND w.position < p;
    IF FOUND THEN
        RETURN true;
    END IF;
    INSERT INTO idempotency.consumer_positions AS w (consumer, partition, position, moved_at)
    VALUES (p_consumer, p_partition, p, now())
    ON CONFLICT (consumer, partition) DO UPDATE
        SET position = EXCLUDED.position, moved_at = EXCLUDED.moved_at
        WHERE w.position < EXCLUDED.position;
    RETURN FOUND;
END
$$;

CREATE FUNCTION idempotency.accept(consumer text, partition text, "position" bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM idempotency._check_name('consumer', consumer);
    PERFORM idempotency._check_name('partition', partition);
    RETURN idempotency._accept('idempotency.accept()', consumer, partition,
                               idempotency._position("position"));
END
$$;

CREATE FUNCTION idempotency.accept(consumer text, partition text, "position" uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM idempotency._check_name('consumer', consumer);
    PERFORM idempotency._check_name('partition', partition);
    IF "position" IS NULL THEN
        RAISE EXCEPTION 'position must not be null' USING ERRCODE = '22004';
    END IF;
    RETURN idempotency._accept('idempotency.accept()', consumer, partition, "position");
END
$$;

CREATE FUNCTION idempotency.watermark(consumer text, partition text)
RETURNS numeric
LANGUAGE plpgsql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM idempotency._check_name('consumer', consumer);
    PERFORM idempotency._check_name('partition', partition);
    RETURN (SELECT idempotency.position_numeric(w.position) FROM idempotency.consumer_positions w
            WHERE w.consumer = watermark.consumer AND w.partition = watermark.partition);
END
$$;

CREATE FUNCTION idempotency._set_watermark(p_consumer text, p_partition text, p uuid)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM idempotency._check_name('consumer', p_consumer);
    PERFORM idempotency._check_name('partition', p_partition);
    IF p IS NULL THEN
        RAISE EXCEPTION 'position must not be null' USING ERRCODE = '22004';
    END IF;
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute idempotency.set_watermark() in a read-only transaction'
            USING ERRCODE = '25006';
    END IF;
    PERFORM FROM idempotency.consumer_positions w WHERE w.consumer = p_consumer
        LIMIT 1 FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" does not exist', p_consumer USING ERRCODE = '42704',
            DETAIL = 'It has no watermark in any partition.',
            HINT = 'A consumer comes into being with its first accept.';
    END IF;
    INSERT INTO idempotency.consumer_positions AS w (consumer, partition, position, moved_at)
    VALUES (p_consumer, p_partition, p, now())
    ON CONFLICT (consumer, partition) DO UPDATE
        SET position = EXCLUDED.position, moved_at = EXCLUDED.moved_at;
END
$$;

CREATE FUNCTION idempotency.set_watermark(consumer text, partition text, "position" bigint)
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT idempotency._set_watermark(consumer, partition, idempotency._position("position")) $$;

CREATE FUNCTION idempotency.set_watermark(consumer text, partition text, "position" uuid)
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT idempotency._set_watermark(consumer, partition, "position") $$;

CREATE FUNCTION idempotency.drop_consumer(consumer text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dropped bigint;
BEGIN
    PERFORM idempotency._check_name('consumer', consumer);
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute idempotency.drop_consumer() in a read-only transaction'
            USING ERRCODE = '25006';
    END IF;
    DELETE FROM idempotency.consumer_positions w WHERE w.consumer = drop_consumer.consumer;
    GET DIAGNOSTICS dropped = ROW_COUNT;
    IF dropped = 0 THEN
        RAISE EXCEPTION 'consumer "%" does not exist', consumer USING ERRCODE = '42704',
            DETAIL = 'It has no watermark in any partition.',
            HINT = 'A consumer comes into being with its first accept.';
    END IF;
    RETURN dropped;
END
$$;

CREATE VIEW idempotency.watermarks AS
    SELECT w.consumer, w.partition, idempotency.position_numeric(w.position) AS watermark,
           w.position, w.moved_at,
           CASE WHEN k.commit_lsn OPERATOR(pg_catalog.<>) '0/0'::pg_catalog.pg_lsn
                 AND k.lsn OPERATOR(pg_catalog.<=) k.commit_lsn THEN k.commit_lsn END
               AS commit_lsn,
           CASE WHEN k.commit_lsn OPERATOR(pg_catalog.<>) '0/0'::pg_catalog.pg_lsn
                 AND k.lsn OPERATOR(pg_catalog.<=) k.commit_lsn THEN k.lsn END AS lsn
    FROM idempotency.consumer_positions w
    CROSS JOIN LATERAL pg_catalog.replace(w.position::pg_catalog.text, '-', '') AS h(hex)
    CROSS JOIN LATERAL (SELECT
        (pg_catalog.substr(h.hex, 1, 8) OPERATOR(pg_catalog.||) '/'
            OPERATOR(pg_catalog.||) pg_catalog.substr(h.hex, 9, 8))::pg_catalog.pg_lsn,
        (pg_catalog.substr(h.hex, 17, 8) OPERATOR(pg_catalog.||) '/'
            OPERATOR(pg_catalog.||) pg_catalog.substr(h.hex, 25, 8))::pg_catalog.pg_lsn
        ) AS k(commit_lsn, lsn);

REVOKE ALL ON idempotency.watermarks FROM PUBLIC;
REVOKE ALL ON FUNCTION
    idempotency.create_stream(text, integer),
    idempotency.drop_stream(text),
    idempotency.next_key(text),
    idempotency.stream_positions(),
    idempotency.set_stream_floor(text, bigint),
    idempotency.accept(text, text, bigint),
    idempotency.accept(text, text, uuid),
    idempotency.watermark(text, text),
    idempotency.set_watermark(text, text, bigint),
    idempotency.set_watermark(text, text, uuid),
    idempotency.drop_consumer(text),
    idempotency._stream_sequence(text),
    idempotency._check_stream(text, text),
    idempotency._position(bigint),
    idempotency._accept(text, text, text, uuid),
    idempotency._set_watermark(text, text, uuid)
FROM PUBLIC;
