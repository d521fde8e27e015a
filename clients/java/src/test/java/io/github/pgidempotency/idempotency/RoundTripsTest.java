package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.pgidempotency.idempotency.IdempotencyClient.Answer;
import io.github.pgidempotency.idempotency.IdempotencyClient.Request;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.Statement;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/**
 * The round trips of the helpers and of the filter, counted on the wire
 * ({@link CountingSocketFactory}): the same as the Node client's. A new key: reserve_begin
 * (which opens the transaction), the work's statements, complete + COMMIT in one; a replay:
 * reserve_begin alone. On a server that refuses reserve_begin: BEGIN + reserve in one round
 * trip, and a ROLLBACK after a replay.
 */
class RoundTripsTest {
  static final String INSERT = "INSERT INTO orders (scope, key, item) VALUES ($1, $2, $3)";
  static final String COMPLETE_COMMIT =
      "SELECT idempotency.complete($1, $2, $3::integer, $4::jsonb, $5::integer); COMMIT";

  static IdempotencyClient.Work insert(String scope, String key) {
    return (tx, r) -> {
      TestDb.insertOrder(tx, scope, key, "book");
      return new Answer(201, "{\"ok\": true}");
    };
  }

  static void assertTrips(List<String> trips, String... starts) {
    String all = String.join("\n", trips);
    assertEquals(starts.length, trips.size(), all);
    for (int i = 0; i < starts.length; i++) {
      assertTrue(trips.get(i).startsWith(starts[i]) || trips.get(i).contains(starts[i]),
          "round trip " + (i + 1) + " is not " + starts[i] + ":\n" + all);
    }
  }

  /**
   * A data source whose connections count their round trips, its server's edition already
   * asked (once per data source, on a connection of its own: not counted in the tests).
   */
  static DataSource countingDataSource() throws Exception {
    TestDb.db(); // the test database exists
    DataSource ds = CountingSocketFactory.dataSource();
    Versions.edition(ds);
    return ds;
  }

  /** A client whose connections count their round trips. */
  static IdempotencyClient countingClient() throws Exception {
    return new IdempotencyClient(countingDataSource());
  }

  @Test
  void runOnce() throws Exception {
    IdempotencyClient client = countingClient();
    String scope = TestDb.unique("trips");
    Request req = Request.of(scope, "k", "{\"item\": \"book\"}");
    assertFalse(client.runOnce(req, insert(scope, "k")).replayed());
    List<String> trips = CountingSocketFactory.trips();
    assertTrips(trips, "idempotency.reserve_begin(", INSERT, COMPLETE_COMMIT);
    assertEquals(COMPLETE_COMMIT, trips.get(2));
    assertTrue(client.runOnce(req, insert(scope, "k")).replayed());
    assertTrips(CountingSocketFactory.trips(), "idempotency.reserve_begin(");
    assertEquals(1, TestDb.orders(scope, "k"));
  }

  @Test
  void aFailedCompleteRollsTheWorkBack() throws Exception {
    IdempotencyClient client = countingClient();
    Request req = Request.of(TestDb.unique("trips"), "k", "{}");
    String scope = req.scope();
    // a response that is not JSON: complete fails, and the server skips the COMMIT after it
    IdempotencyException e =
        org.junit.jupiter.api.Assertions.assertThrows(
            IdempotencyException.class,
            () ->
                client.runOnce(
                    req,
                    (tx, r) -> {
                      TestDb.insertOrder(tx, scope, "k", "book");
                      return new Answer(201, "{not json");
                    }));
    assertEquals(IdempotencyException.INVALID_JSON, e.sqlState());
    assertTrips(CountingSocketFactory.trips(),
        "idempotency.reserve_begin(", INSERT, COMPLETE_COMMIT, "ROLLBACK");
    assertEquals(0, TestDb.orders(scope, "k"));
    try (Connection c = TestDb.db().getConnection()) {
      assertEquals(null, Idempotency.lookup(c, scope, "k"));
    }
  }

  @Test
  void theFilter() throws Exception {
    try (Server server =
        new Server(new FilterTest.Orders(), FilterTest.filter(countingDataSource()))) {
      String key = TestDb.unique("trips");
      HttpResponse<String> first = server.post("/orders", key, "{\"item\": \"book\"}");
      assertEquals(201, first.statusCode());
      assertTrips(CountingSocketFactory.trips(), "idempotency.reserve_begin(", INSERT, COMPLETE_COMMIT);
      HttpResponse<String> again = server.post("/orders", key, "{\"item\": \"book\"}");
      assertEquals("true", again.headers().firstValue("Idempotent-Replayed").orElse(""));
      assertTrips(CountingSocketFactory.trips(), "idempotency.reserve_begin(");
    }
  }

  /**
   * A server that refuses reserve_begin although its edition offered it (say keys distributed
   * by Citus): the function is renamed for the test after the edition was asked.
   */
  @Test
  void aServerThatRefusesReserveBegin() throws Exception {
    String fn = "idempotency.reserve_begin(text, text, bytea, interval, interval, interval)";
    DataSource clientDs = countingDataSource();
    DataSource filterDs = countingDataSource();
    try (Connection admin = TestDb.db().getConnection();
        Statement s = admin.createStatement()) {
      s.execute("ALTER FUNCTION " + fn + " RENAME TO reserve_begin_hidden");
      try {
        IdempotencyClient client = new IdempotencyClient(clientDs);
        String scope = TestDb.unique("trips");
        Request req = Request.of(scope, "k", "{}");
        assertFalse(client.runOnce(req, insert(scope, "k")).replayed());
        assertTrips(CountingSocketFactory.trips(),
            "idempotency.reserve_begin(", "BEGIN; SELECT", INSERT, COMPLETE_COMMIT);
        assertTrue(CountingSocketFactory.trips().get(1).contains("idempotency.reserve($1"));
        // the client stops asking for reserve_begin
        assertTrue(client.runOnce(req, insert(scope, "k")).replayed());
        assertTrips(CountingSocketFactory.trips(), "BEGIN; SELECT", "ROLLBACK");
        assertEquals(1, TestDb.orders(scope, "k"));

        try (Server server = new Server(new FilterTest.Orders(), FilterTest.filter(filterDs))) {
          String key = TestDb.unique("trips");
          assertEquals(201, server.post("/orders", key, "{}").statusCode());
          assertTrips(CountingSocketFactory.trips(),
              "idempotency.reserve_begin(", "BEGIN; SELECT", INSERT, COMPLETE_COMMIT);
          HttpResponse<String> again = server.post("/orders", key, "{}");
          assertEquals("true", again.headers().firstValue("Idempotent-Replayed").orElse(""));
          assertTrips(CountingSocketFactory.trips(), "BEGIN; SELECT", "ROLLBACK");
        }
      } finally {
        s.execute("ALTER FUNCTION idempotency.reserve_begin_hidden(text, text, bytea, interval,"
            + " interval, interval) RENAME TO reserve_begin");
      }
    }
  }

  /**
   * A server whose edition has no reserve_begin (the managed edition, a server before 0.3.0;
   * here the function is renamed for the test): the client asks the edition once, on the
   * connection of its first claim, and never sends reserve_begin.
   */
  @Test
  void aServerWithoutReserveBeginIsAskedOnceNeverRefused() throws Exception {
    String fn = "idempotency.reserve_begin(text, text, bytea, interval, interval, interval)";
    try (Connection admin = TestDb.db().getConnection();
        Statement s = admin.createStatement()) {
      s.execute("ALTER FUNCTION " + fn + " RENAME TO reserve_begin_hidden");
      try {
        IdempotencyClient client = new IdempotencyClient(CountingSocketFactory.dataSource());
        String scope = TestDb.unique("trips");
        Request req = Request.of(scope, "k", "{}");
        assertFalse(client.runOnce(req, insert(scope, "k")).replayed());
        assertTrips(CountingSocketFactory.trips(),
            "SELECT CASE WHEN e.extversion", "BEGIN; SELECT", INSERT, COMPLETE_COMMIT);
        assertFalse(client.edition().offers("reserve_begin"));
        assertTrue(client.runOnce(req, insert(scope, "k")).replayed());
        assertTrips(CountingSocketFactory.trips(), "BEGIN; SELECT", "ROLLBACK");
        assertEquals(1, TestDb.orders(scope, "k"));
      } finally {
        s.execute("ALTER FUNCTION idempotency.reserve_begin_hidden(text, text, bytea, interval,"
            + " interval, interval) RENAME TO reserve_begin");
      }
    }
  }

  /**
   * Each ClaimEvent's roundTrips is what the wire shows less the work's or the handler's own
   * INSERT: runOnce, runOnceStatement, consumeOnce, applyOnce and the filter, new and replay.
   */
  @Test
  void theClaimEventsCountTheRoundTripsOnTheWire() throws Exception {
    BlockingQueue<IdempotencyClient.ClaimEvent> events = new LinkedBlockingQueue<>();
    IdempotencyClient client = countingClient();
    client.setClaimListener(events::add, false);
    String scope = TestDb.unique("trips");
    Request req = Request.of(scope, "k", "{}");
    IdempotencyClient.OneStatement st = IdempotencyClient.OneStatement.of("SELECT 1");
    IdempotencyClient.Apply consume = tx -> TestDb.insertOrder(tx, scope, "m", "book");
    IdempotencyClient.Apply apply = tx -> TestDb.insertOrder(tx, scope, "p0@7", "book");
    List<String> calls = new java.util.ArrayList<>();
    Runnable[] steps = {
      () -> client.runOnce(req, insert(scope, "k")),
      () -> client.runOnce(req, insert(scope, "k")),
      () -> client.runOnceStatement(Request.of(scope, "s", "{}"), st),
      () -> client.runOnceStatement(Request.of(scope, "s", "{}"), st),
      () -> client.consumeOnce(scope, "m", consume),
      () -> client.consumeOnce(scope, "m", consume),
      () -> client.applyOnce(scope, "p0", 7, apply),
      () -> client.applyOnce(scope, "p0", 7, apply),
    };
    for (Runnable step : steps) {
      step.run();
      calls.add(observedAndSent(events.take(), CountingSocketFactory.trips()));
    }
    IdempotencyFilter filter = IdempotencyFilter.builder()
        .dataSource(countingDataSource())
        .scope(r -> r.getHeader("X-Account"))
        .claimListener(events::add, false)
        .build();
    try (Server server = new Server(new FilterTest.Orders(), filter)) {
      String key = TestDb.unique("trips");
      for (int i = 0; i < 2; i++) {
        assertEquals(201, server.post("/orders", key, "{\"item\": \"book\"}").statusCode());
        calls.add(observedAndSent(events.take(), CountingSocketFactory.trips()));
      }
    }
    assertEquals(List.of(
        "runOnce new 2 2", "runOnce replay 1 1",
        "runOnceStatement new 1 1", "runOnceStatement replay 1 1",
        "consumeOnce new 2 2", "consumeOnce replay 2 2",
        "applyOnce new 2 2", "applyOnce replay 2 2",
        "filter new 2 2", "filter replay 1 1"), calls);
  }

  /** "helper outcome observed sent": the event's round trips, then the wire's less INSERTs. */
  static String observedAndSent(IdempotencyClient.ClaimEvent e, List<String> trips) {
    long own = trips.stream().filter(t -> !t.contains("INSERT INTO orders")).count();
    return e.helper() + " " + e.outcome() + " " + e.roundTrips() + " " + own;
  }
}
