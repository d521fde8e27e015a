package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.pgidempotency.idempotency.IdempotencyClient.OneStatement;
import io.github.pgidempotency.idempotency.IdempotencyClient.Request;
import io.github.pgidempotency.idempotency.IdempotencyClient.Result;
import jakarta.servlet.http.HttpServlet;
import java.math.BigDecimal;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/**
 * The one-statement form (execute_once): its round trips, outcomes, parameter types, errors,
 * the filter's statement option and a burst of one key.
 */
class ExecuteOnceTest {
  static final String INSERT =
      "INSERT INTO orders (scope, key, item) VALUES ($1, $2, $3) RETURNING id, item";

  @Test
  void oneRoundTripPerNewKeyAndPerReplay() throws Exception {
    IdempotencyClient client = RoundTripsTest.countingClient();
    String scope = TestDb.unique("exec");
    Request req = Request.of(scope, "k", "{\"item\": \"lamp\"}");
    Result first = client.runOnceStatement(req, OneStatement.of(INSERT, scope, "k", "lamp"));
    RoundTripsTest.assertTrips(CountingSocketFactory.trips(), "idempotency.execute_once(");
    assertFalse(first.replayed());
    assertEquals(201, first.statusCode());
    assertTrue(first.response().matches("\\{\"id\": \\d+, \"item\": \"lamp\"\\}"), first.response());
    Result again = client.runOnceStatement(req, OneStatement.of(INSERT, scope, "k", "lamp"));
    RoundTripsTest.assertTrips(CountingSocketFactory.trips(), "idempotency.execute_once(");
    assertTrue(again.replayed());
    assertEquals(first.response(), again.response());
    assertEquals(1, TestDb.orders(scope, "k"));
    assertThrows(
        IdempotencyException.KeyMismatch.class,
        () ->
            client.runOnceStatement(
                Request.of(scope, "k", "{\"item\": \"sofa\"}"),
                OneStatement.of(INSERT, scope, "k", "sofa")));
  }

  @Test
  void inProgressRunsNothing() throws Exception {
    DataSource ds = TestDb.db();
    String scope = TestDb.unique("exec");
    try (Connection holder = ds.getConnection()) {
      holder.setAutoCommit(false);
      Idempotency.reserve(holder, scope, "k", null, null);
      assertThrows(
          IdempotencyException.KeyInProgress.class,
          () ->
              new IdempotencyClient(ds)
                  .runOnceStatement(
                      Request.of(scope, "k", null), OneStatement.of(INSERT, scope, "k", "x")));
      holder.rollback();
    }
    assertEquals(0, TestDb.orders(scope, "k"));
  }

  enum Color {
    RED
  }

  @Test
  void parameterTypes() throws Exception {
    String text = "it's \"quoted\" \\ {a,b} NULL";
    UUID u = UUID.fromString("018f3a4b-5c6d-7e8f-90a1-b2c3d4e5f607");
    List<Object> params =
        Arrays.asList(
            41,
            2.5,
            true,
            text,
            OffsetDateTime.parse("2026-11-27T13:45:06.123456Z"),
            Duration.ofSeconds(90),
            u,
            Map.of("a", List.of(1, 2)),
            null,
            new byte[] {1, 2, (byte) 255},
            new String[] {"x", "y"},
            new BigDecimal("12.50"),
            Long.MAX_VALUE,
            Color.RED);
    try (Connection c = TestDb.db().getConnection()) {
      Reservation r =
          Idempotency.executeOnce(
              c,
              "acct_exec",
              TestDb.unique("types"),
              null,
              "SELECT $1::integer + 1 AS i, $2::float8 AS f, $3::boolean AS b, $4 AS s,"
                  + " $5::timestamptz = '2026-11-27 13:45:06.123456+00' AS t,"
                  + " $6::interval = '90 seconds' AS d, $7::uuid AS u, $8::jsonb AS j,"
                  + " $9::text IS NULL AS n, $10::bytea = '\\x0102ff' AS by, $11::jsonb AS arr,"
                  + " $12::numeric AS num, $13::bigint AS big, $14 AS color",
              params,
              200,
              null);
      assertEquals(Outcome.NEW, r.outcome());
      assertEquals(200, r.statusCode());
      assertEquals(
          // the keys in jsonb's order (shorter first)
          "{\"b\": true, \"d\": true, \"f\": 2.5, \"i\": 42, \"j\": {\"a\": [1, 2]}, \"n\": true,"
              + " \"s\": \"it's \\\"quoted\\\" \\\\ {a,b} NULL\", \"t\": true,"
              + " \"u\": \"018f3a4b-5c6d-7e8f-90a1-b2c3d4e5f607\", \"by\": true,"
              + " \"arr\": [\"x\", \"y\"], \"big\": 9223372036854775807, \"num\": 12.50,"
              + " \"color\": \"RED\"}",
          r.response());
    }
    assertThrows(
        IllegalArgumentException.class, () -> Transactions.statementParams(List.of(new Object())));
  }

  @Test
  void responsesAndErrors() throws Exception {
    DataSource ds = TestDb.db();
    IdempotencyClient client = new IdempotencyClient(ds);
    String scope = TestDb.unique("exec");
    Result none = client.runOnceStatement(Request.of(scope, "none", null), OneStatement.of("SELECT 1 WHERE false"));
    assertNull(none.response());
    Result json =
        client.runOnceStatement(
            Request.of(scope, "json", null), OneStatement.of("SELECT jsonb_build_array($1::int, $2)", 7, "x"));
    assertEquals("[7, \"x\"]", json.response());
    IdempotencyException rows =
        assertThrows(
            IdempotencyException.class,
            () ->
                client.runOnceStatement(
                    Request.of(scope, "rows", null),
                    OneStatement.of("SELECT g FROM generate_series(1, 2) g")));
    assertEquals("21000", rows.sqlState());
    // an error of the statement: the key stays new, and a later call runs it
    String divide = "INSERT INTO orders (scope, key, item) VALUES ($1, $2, 'x') RETURNING 1 / $3::int AS q";
    IdempotencyException zero =
        assertThrows(
            IdempotencyException.class,
            () -> client.runOnceStatement(Request.of(scope, "boom", null), OneStatement.of(divide, scope, "boom", 0)));
    assertEquals("22012", zero.sqlState());
    try (Connection c = ds.getConnection()) {
      assertNull(Idempotency.lookup(c, scope, "boom"));
    }
    assertEquals(0, TestDb.orders(scope, "boom"));
    Result after = client.runOnceStatement(Request.of(scope, "boom", null), OneStatement.of(divide, scope, "boom", 1));
    assertEquals("{\"q\": 1}", after.response());
    assertEquals(1, TestDb.orders(scope, "boom"));
  }

  @Test
  void inTheCallersTransaction() throws Exception {
    String scope = TestDb.unique("exec");
    try (Connection tx = TestDb.db().getConnection()) {
      tx.setAutoCommit(false);
      Result r =
          IdempotencyClient.runOnceStatementIn(
              tx, Request.of(scope, "k", null), new OneStatement(INSERT, List.of(scope, "k", "tx"), 202));
      assertEquals(202, r.statusCode());
      tx.rollback();
      assertNull(Idempotency.lookup(tx, scope, "k"));
    }
    assertEquals(0, TestDb.orders(scope, "k"));
  }

  /** The extension at 0.2.0 has no execute_once: an error that names it. */
  @Test
  void aServerWithoutExecuteOnce() throws Exception {
    try (Connection c = TestDb.dataSource("postgres").getConnection();
        Statement s = c.createStatement()) {
      s.execute("DROP DATABASE IF EXISTS " + TestDb.DB + "_old WITH (FORCE)");
      s.execute("CREATE DATABASE " + TestDb.DB + "_old");
    }
    DataSource old = TestDb.dataSource(TestDb.DB + "_old");
    try (Connection c = old.getConnection();
        Statement s = c.createStatement()) {
      s.execute("CREATE EXTENSION idempotency VERSION '0.2.0'");
    }
    IdempotencyException e =
        assertThrows(
            IdempotencyException.class,
            () -> new IdempotencyClient(old).runOnceStatement(Request.of("s", "k", null), OneStatement.of("SELECT 1")));
    assertEquals(IdempotencyException.UNDEFINED_FUNCTION, e.sqlState());
    assertTrue(e.getMessage().contains("idempotency.execute_once") && e.getMessage().contains("0.3.0"), e.getMessage());
    try (Server server = new Server(new Unused(), filter(old))) {
      HttpResponse<String> a = server.post("/orders", TestDb.unique("old"), "{\"item\": \"x\"}");
      assertEquals(500, a.statusCode());
      assertTrue(a.body().contains("internal_error"), a.body());
    }
  }

  /** The chain behind a statement filter: never reached. */
  static final class Unused extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void service(jakarta.servlet.http.HttpServletRequest req, jakarta.servlet.http.HttpServletResponse res) {
      throw new IllegalStateException("the statement filter called the chain");
    }
  }

  static IdempotencyFilter filter(DataSource ds) {
    return IdempotencyFilter.builder()
        .dataSource(ds)
        .scope(r -> r.getHeader("X-Account"))
        .statement(
            // an empty item fails the statement (division by zero)
            "INSERT INTO orders (scope, key, item) SELECT $1, $2, $3 WHERE 1 / length($3) >= 0"
                + " RETURNING id, item",
            (r, body) -> {
              if (!(Json.parse(body) instanceof Map<?, ?> m) || !(m.get("item") instanceof String item)) {
                throw new IllegalArgumentException("the body needs an item");
              }
              return List.of(r.getHeader("X-Account"), r.getHeader("Idempotency-Key"), item);
            },
            201)
        .build();
  }

  @Test
  void theFiltersStatement() throws Exception {
    try (Server server = new Server(new Unused(), filter(CountingSocketFactory.dataSource()))) {
      String key = TestDb.unique("fs");
      HttpResponse<String> first = server.post("/orders", key, "{\"item\": \"desk\"}");
      RoundTripsTest.assertTrips(CountingSocketFactory.trips(), "idempotency.execute_once(");
      assertEquals(201, first.statusCode(), first.body());
      assertTrue(first.body().matches("\\{\"id\":\\d+,\"item\":\"desk\"\\}"), first.body());
      assertEquals("application/json", first.headers().firstValue("Content-Type").orElse(""));
      assertTrue(first.headers().firstValue("Idempotent-Replayed").isEmpty());
      HttpResponse<String> again = server.post("/orders", key, "{ \"item\" : \"desk\" }");
      RoundTripsTest.assertTrips(CountingSocketFactory.trips(), "idempotency.execute_once(");
      assertEquals(201, again.statusCode());
      assertEquals(first.body(), again.body());
      assertEquals("true", again.headers().firstValue("Idempotent-Replayed").orElse(""));
      assertEquals(1, TestDb.orders("acct-1", key));
      HttpResponse<String> reused = server.post("/orders", key, "{\"item\": \"chair\"}");
      assertEquals(422, reused.statusCode());
      assertTrue(reused.body().contains("idempotency_key_reused"));
      HttpResponse<String> missing = server.post("/orders", null, "{\"item\": \"chair\"}");
      assertEquals(400, missing.statusCode());
      assertTrue(missing.body().contains("idempotency_key_missing"));
      HttpResponse<String> noItem = server.post("/orders", TestDb.unique("fs"), "{}");
      assertEquals(400, noItem.statusCode());
      assertTrue(noItem.body().contains("invalid_request"));
      String held = TestDb.unique("fs-held");
      try (Connection holder = TestDb.db().getConnection()) {
        holder.setAutoCommit(false);
        Idempotency.reserve(holder, "acct-1", held, null, null);
        HttpResponse<String> busy = server.post("/orders", held, "{\"item\": \"desk\"}");
        holder.rollback();
        assertEquals(409, busy.statusCode());
        assertTrue(busy.headers().firstValue("Retry-After").isPresent());
      }
      // an empty item: the statement fails, 500, and the key stays new
      String bad = TestDb.unique("fs-bad");
      HttpResponse<String> failed = server.post("/orders", bad, "{\"item\": \"\"}");
      assertEquals(500, failed.statusCode());
      try (Connection c = TestDb.db().getConnection()) {
        assertNull(Idempotency.lookup(c, "acct-1", bad));
      }
      assertEquals(201, server.post("/orders", bad, "{\"item\": \"ab\"}").statusCode());
      assertEquals(1, TestDb.orders("acct-1", bad));
    }
    try (Server server = new Server(new Unused(), filter(TestDb.unreachable()))) {
      HttpResponse<String> down = server.post("/orders", TestDb.unique("fs"), "{\"item\": \"x\"}");
      assertEquals(503, down.statusCode());
      assertEquals("1", down.headers().firstValue("Retry-After").orElse(""));
    }
  }

  /** 8 concurrent requests with one key: one order, every final answer the same. */
  @Test
  void aBurstOfOneKey() throws Exception {
    try (Server server = new Server(new Unused(), filter(TestDb.db()))) {
      String key = TestDb.unique("burst");
      ExecutorService pool = Executors.newFixedThreadPool(8);
      try {
        List<Callable<HttpResponse<String>>> calls = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
          calls.add(
              () -> {
                long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
                while (true) {
                  HttpResponse<String> a = server.post("/orders", key, "{\"item\": \"burst\"}");
                  if (a.statusCode() != 409 || System.nanoTime() > deadline) return a;
                  Thread.sleep(10); // a client's back-off before its retry
                }
              });
        }
        List<HttpResponse<String>> answers = new ArrayList<>();
        for (Future<HttpResponse<String>> f : pool.invokeAll(calls)) answers.add(f.get());
        int replayed = 0;
        for (HttpResponse<String> a : answers) {
          assertEquals(201, a.statusCode(), a.body());
          assertEquals(answers.get(0).body(), a.body());
          if (a.headers().firstValue("Idempotent-Replayed").isPresent()) replayed++;
        }
        assertEquals(7, replayed);
        assertEquals(1, TestDb.orders("acct-1", key));
      } finally {
        pool.shutdownNow();
      }
    }
  }
}
