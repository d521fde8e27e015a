package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.servlet.Filter;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class FilterTest {
  static final AtomicInteger RUNS = new AtomicInteger();

  /** The application: POST /orders inserts an order in the claim's transaction. */
  static final class Orders extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void doPost(HttpServletRequest req, HttpServletResponse res) throws IOException {
      RUNS.incrementAndGet();
      IdempotencyFilter.Claim claim = IdempotencyFilter.claim(req);
      String body = new String(req.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      try {
        TestDb.insertOrder(claim.transaction(), claim.scope(), claim.key(), body);
      } catch (SQLException e) {
        throw new IOException(e);
      }
      if (req.getRequestURI().endsWith("/fail")) {
        res.sendError(500, "failed");
        return;
      }
      if (req.getRequestURI().endsWith("/text")) {
        res.setStatus(202);
        res.setContentType("text/plain");
        res.getWriter().write("accepted");
        return;
      }
      res.setStatus(201);
      res.setContentType("application/json");
      res.setHeader("Location", "/orders/" + claim.key());
      res.setHeader("X-Order", "o-" + claim.attempt()); // kept (keepHeaders)
      res.setHeader("X-Trace", "t-1"); // not kept
      res.getWriter().write("{\"order\": " + Json.quote(claim.key()) + ", \"attempt\": " + claim.attempt() + "}");
    }
  }

  static IdempotencyFilter filter(DataSource ds) {
    return IdempotencyFilter.builder()
        .dataSource(ds)
        .scope(
            r -> {
              String a = r.getHeader("X-Account");
              if (a == null) throw new IdempotencyFilter.Refused(401, "unauthorized", "no account");
              return a;
            })
        .exclude("client_time")
        .keepHeaders("x-order")
        .limit(1000)
        .build();
  }

  static Server server;

  @BeforeAll
  static void start() throws Exception {
    server = new Server(new Orders(), filter(TestDb.db()));
  }

  @AfterAll
  static void stop() throws Exception {
    server.close();
  }

  @Test
  void firstAnswerThenReplay() throws Exception {
    String key = TestDb.unique("f");
    int before = RUNS.get();
    HttpResponse<String> first = server.post("/orders", key, "{\"item\": \"book\", \"client_time\": 1}");
    assertEquals(201, first.statusCode());
    assertTrue(first.headers().firstValue("Idempotent-Replayed").isEmpty());
    assertEquals("/orders/" + key, first.headers().firstValue("Location").orElse(""));
    // another client_time is excluded from the fingerprint: the same request
    HttpResponse<String> again = server.post("/orders", key, "{\"client_time\": 2, \"item\": \"book\"}");
    assertEquals(201, again.statusCode());
    assertEquals("true", again.headers().firstValue("Idempotent-Replayed").orElse(""));
    assertEquals("{\"order\":" + Json.quote(key) + ",\"attempt\":1}", again.body());
    // the headers a client reads, as they were: Location, Content-Type and the kept X-Order
    assertEquals("/orders/" + key, again.headers().firstValue("Location").orElse(""));
    assertEquals("application/json", again.headers().firstValue("Content-Type").orElse(""));
    assertEquals("o-1", again.headers().firstValue("X-Order").orElse(""));
    assertTrue(again.headers().firstValue("X-Trace").isEmpty());
    assertEquals(1, RUNS.get() - before);
    assertEquals(1, TestDb.orders("acct-1", key));

    HttpResponse<String> reused = server.post("/orders", key, "{\"item\": \"pen\"}");
    assertEquals(422, reused.statusCode());
    assertTrue(reused.body().contains("idempotency_key_reused"));
  }

  @Test
  void badRequests() throws Exception {
    HttpResponse<String> missing = server.post("/orders", null, "{}");
    assertEquals(400, missing.statusCode());
    assertTrue(missing.body().contains("idempotency_key_missing"));
    HttpResponse<String> malformed = server.post("/orders", "has space", "{}");
    assertEquals(400, malformed.statusCode());
    assertTrue(malformed.body().contains("idempotency_key_malformed"));
    HttpResponse<String> notJson = server.post("/orders", TestDb.unique("f"), "{\"a\":");
    assertEquals(400, notJson.statusCode());
    assertTrue(notJson.body().contains("invalid_json"));
    HttpResponse<String> big = server.post("/orders", TestDb.unique("f"), "[" + "1,".repeat(600) + "1]");
    assertEquals(413, big.statusCode());
    HttpResponse<String> noAccount =
        server.http().send(
            java.net.http.HttpRequest.newBuilder(
                    java.net.URI.create("http://127.0.0.1:" + server.port + "/orders"))
                .header("Idempotency-Key", "k")
                .POST(java.net.http.HttpRequest.BodyPublishers.ofString("{}"))
                .build(),
            HttpResponse.BodyHandlers.ofString());
    assertEquals(401, noAccount.statusCode());
  }

  @Test
  void inProgressIs409WithRetryAfter() throws Exception {
    String key = TestDb.unique("f");
    try (Connection holder = TestDb.db().getConnection()) {
      holder.setAutoCommit(false);
      assertEquals(
          Outcome.NEW, Idempotency.reserve(holder, "acct-1", key, Fingerprint.of("{}"), null).outcome());
      HttpResponse<String> busy = server.post("/orders", key, "{}");
      assertEquals(409, busy.statusCode());
      assertEquals("1", busy.headers().firstValue("Retry-After").orElse(""));
      assertTrue(busy.body().contains("idempotency_key_in_use"));
      holder.rollback();
    }
    assertEquals(201, server.post("/orders", key, "{}").statusCode());
  }

  @Test
  void aServerErrorIsNotStoredAndNothingCommits() throws Exception {
    String key = TestDb.unique("f");
    HttpResponse<String> failed = server.post("/orders/fail", key, "{}");
    assertEquals(500, failed.statusCode());
    assertEquals(0, TestDb.orders("acct-1", key));
    try (Connection c = TestDb.db().getConnection()) {
      assertNull(Idempotency.lookup(c, "acct-1", key));
    }
  }

  @Test
  void aTextAnswerReplaysAsItWas() throws Exception {
    String key = TestDb.unique("f");
    HttpResponse<String> first = server.post("/orders/text", key, "text/plain", "plain body");
    assertEquals(202, first.statusCode());
    assertEquals("accepted", first.body());
    HttpResponse<String> replay = server.post("/orders/text", key, "text/plain", "plain body");
    assertEquals(202, replay.statusCode());
    assertEquals("accepted", replay.body());
    assertEquals(
        first.headers().firstValue("Content-Type"), replay.headers().firstValue("Content-Type"));
    try (Connection c = TestDb.db().getConnection()) {
      String stored = Idempotency.lookup(c, "acct-1", key).response();
      assertEquals("\"accepted\"", Json.members(stored).get("text"), stored);
    }
    assertEquals(422, server.post("/orders/text", key, "text/plain", "other body").statusCode());
  }

  @Test
  void theClaimListenerSeesEachRequestWithItsStatus() throws Exception {
    List<IdempotencyClient.ClaimEvent> events = new CopyOnWriteArrayList<>();
    IdempotencyFilter observed = IdempotencyFilter.builder()
        .dataSource(TestDb.db())
        .scope(r -> r.getHeader("X-Account"))
        .claimListener(events::add, false)
        .build();
    String key = TestDb.unique("f");
    String held = TestDb.unique("f");
    try (Server s = new Server(new Orders(), observed)) {
      assertEquals(201, s.post("/orders", key, "{\"item\": \"book\"}").statusCode());
      assertEquals(201, s.post("/orders", key, "{\"item\": \"book\"}").statusCode());
      assertEquals(422, s.post("/orders", key, "{\"item\": \"pen\"}").statusCode());
      try (Connection holder = TestDb.db().getConnection()) {
        holder.setAutoCommit(false);
        Idempotency.reserve(holder, "acct-1", held, Fingerprint.of("{}"), null);
        assertEquals(409, s.post("/orders", held, "{}").statusCode());
        holder.rollback();
      }
      assertEquals(400, s.post("/orders", null, "{}").statusCode()); // no key: no claim
    }
    String[][] want = {{"new", "201"}, {"replay", "201"}, {"mismatch", "422"}, {"in_progress", "409"}};
    assertEquals(want.length, events.size(), events.toString());
    for (int i = 0; i < want.length; i++) {
      IdempotencyClient.ClaimEvent e = events.get(i);
      assertEquals("filter", e.helper(), "event " + i);
      assertEquals("acct-1", e.scope(), "event " + i);
      assertNull(e.key(), "event " + i);
      assertEquals(want[i][0], e.outcome(), "event " + i);
      assertEquals(Integer.parseInt(want[i][1]), e.status(), "event " + i);
      assertNull(e.error(), "event " + i);
    }
    assertEquals(1, events.get(0).attempt());
  }

  @Test
  void anUnreachableDatabaseIs503() throws Exception {
    try (Server down = new Server(new Orders(), filter(TestDb.unreachable()))) {
      HttpResponse<String> r = down.post("/orders", TestDb.unique("f"), "{}");
      assertEquals(503, r.statusCode());
      assertEquals("1", r.headers().firstValue("Retry-After").orElse(""));
      assertTrue(r.body().contains("database_unavailable"));
    }
  }

  /**
   * Join mode: an outer filter opens the application's transaction (as Spring's transaction
   * around a @Transactional handler would), the idempotency filter claims in it, and the
   * outer filter commits or rolls back both.
   */
  static final class Transactional implements Filter {
    static final String TX = "test.tx";

    @Override
    public void doFilter(
        jakarta.servlet.ServletRequest req,
        jakarta.servlet.ServletResponse res,
        jakarta.servlet.FilterChain chain)
        throws IOException, jakarta.servlet.ServletException {
      try (Connection c = TestDb.db().getConnection()) {
        c.setAutoCommit(false);
        req.setAttribute(TX, c);
        chain.doFilter(req, res);
        if ("rollback".equals(((HttpServletRequest) req).getHeader("X-Outcome"))) c.rollback();
        else c.commit();
      } catch (SQLException e) {
        throw new IOException(e);
      }
    }
  }

  @Test
  void joinsTheApplicationsTransaction() throws Exception {
    IdempotencyFilter joined =
        IdempotencyFilter.builder()
            .scope(r -> r.getHeader("X-Account"))
            .joinTransaction(r -> (Connection) r.getAttribute(Transactional.TX))
            .build();
    try (Server s = new Server(new Orders(), new Transactional(), joined)) {
      String key = TestDb.unique("join");
      assertEquals(201, s.post("/orders", key, "{}").statusCode());
      assertEquals(1, TestDb.orders("acct-1", key));
      HttpResponse<String> replay = s.post("/orders", key, "{}");
      assertEquals("true", replay.headers().firstValue("Idempotent-Replayed").orElse(""));
      assertEquals(1, TestDb.orders("acct-1", key));

      String rolled = TestDb.unique("join");
      HttpResponse<String> r =
          s.http().send(
              java.net.http.HttpRequest.newBuilder(
                      java.net.URI.create("http://127.0.0.1:" + s.port + "/orders"))
                  .header("Idempotency-Key", rolled)
                  .header("X-Account", "acct-1")
                  .header("X-Outcome", "rollback")
                  .header("Content-Type", "application/json")
                  .POST(java.net.http.HttpRequest.BodyPublishers.ofString("{}"))
                  .build(),
              HttpResponse.BodyHandlers.ofString());
      assertEquals(201, r.statusCode());
      // the application rolled back: neither its order nor the claim remains
      assertEquals(0, TestDb.orders("acct-1", rolled));
      try (Connection c = TestDb.db().getConnection()) {
        assertNull(Idempotency.lookup(c, "acct-1", rolled));
      }
      assertFalse(s.post("/orders", rolled, "{}").headers().firstValue("Idempotent-Replayed").isPresent());
    }
  }
}
