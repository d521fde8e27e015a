package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * What test/vectors/client.json says every client does the same way: durations sent as whole
 * microseconds (nothing rounded to milliseconds), a server error of each listed SQLSTATE
 * carrying it.
 */
class SpecTest {
  @SuppressWarnings("unchecked")
  static Map<String, Object> spec() throws Exception {
    byte[] text = Files.readAllBytes(Path.of("../../test/vectors/client.json"));
    return (Map<String, Object>) Json.parse(text);
  }

  @Test
  @SuppressWarnings("unchecked")
  void durationsAsTheSpecEncodesThem() throws Exception {
    Map<String, Object> duration = (Map<String, Object>) spec().get("duration");
    List<Object> vectors = (List<Object>) duration.get("vectors");
    assertFalse(vectors.isEmpty());
    for (Object o : vectors) {
      Map<String, Object> v = (Map<String, Object>) o;
      long micros = Long.parseLong(((Json.Num) v.get("microseconds")).canonical());
      assertEquals(v.get("text"), Idempotency.interval(Duration.ofNanos(micros * 1000)), "" + v);
    }
  }

  @Test
  void subMillisecondDurationReachesTheServerWhole() throws SQLException {
    var options = new Idempotency.ReserveOptions(Duration.ofNanos(1_500_000), null, null);
    try (Connection c = TestDb.db().getConnection();
        PreparedStatement st =
            c.prepareStatement("SELECT ?::interval = interval '1500 microseconds'")) {
      st.setString(1, options.lockTtlText());
      try (ResultSet rs = st.executeQuery()) {
        assertTrue(rs.next());
        assertTrue(rs.getBoolean(1), options.lockTtlText());
      }
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  void serverErrorsKeepTheirSqlState() throws Exception {
    try (Connection c = TestDb.db().getConnection(); Statement st = c.createStatement()) {
      st.execute("CREATE FUNCTION pg_temp.raise_sqlstate(code text) RETURNS void LANGUAGE plpgsql"
          + " AS $$ BEGIN RAISE EXCEPTION 'listed' USING ERRCODE = code; END $$");
      for (Object o : (List<Object>) spec().get("sqlstates")) {
        Map<String, Object> entry = (Map<String, Object>) o;
        if (!Boolean.TRUE.equals(entry.get("translated"))) continue;
        String code = (String) entry.get("sqlstate");
        try (PreparedStatement raise = c.prepareStatement("SELECT pg_temp.raise_sqlstate(?)")) {
          raise.setString(1, code);
          raise.execute();
        } catch (SQLException e) {
          IdempotencyException typed = IdempotencyException.from(e);
          assertEquals(code, typed.sqlState());
          if ("IK003".equals(code)) assertTrue(typed instanceof IdempotencyException.KeyInProgress);
          if ("22P02".equals(code)) assertTrue(typed instanceof IdempotencyException.InvalidJson);
          continue;
        }
        throw new AssertionError(code + " raised nothing");
      }
      // an alias of invalid JSON (22P05, 22021) is an InvalidJson keeping its own SQLSTATE
      for (String alias : ((Map<String, Object>) spec().get("aliases")).keySet()) {
        try (PreparedStatement raise = c.prepareStatement("SELECT pg_temp.raise_sqlstate(?)")) {
          raise.setString(1, alias);
          raise.execute();
          throw new AssertionError(alias + " raised nothing");
        } catch (SQLException e) {
          IdempotencyException typed = IdempotencyException.from(e);
          assertTrue(typed instanceof IdempotencyException.InvalidJson, alias);
          assertEquals(alias, typed.sqlState());
        }
      }
    }
  }
}
