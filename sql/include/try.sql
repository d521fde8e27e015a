-- pg_temp.try(statement): 'ok', or the SQLSTATE and message of the error it raised; lets a
-- test show both without stopping. Included with \i sql/include/try.sql (pg_regress feeds
-- each test to psql on standard input, from the repository root).
CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
