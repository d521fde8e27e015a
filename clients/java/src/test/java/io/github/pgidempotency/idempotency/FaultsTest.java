package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class FaultsTest {
  /** Backend pids of handlers that reached the middle of their work, for the test to kill. */
  static final BlockingQueue<Integer> WORKING = new LinkedBlockingQueue<>();

  static volatile CountDownLatch killed = new CountDownLatch(0);

  /** POST /slow: inserts, reports its backend, waits until the test terminated it, goes on. */
  static final class Work extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void doPost(HttpServletRequest req, HttpServletResponse res) throws IOException {
      IdempotencyFilter.Claim claim = IdempotencyFilter.claim(req);
      Connection tx = claim.transaction();
      try {
        TestDb.insertOrder(tx, claim.scope(), claim.key(), "slow");
        if (req.getRequestURI().endsWith("/slow")) {
          try (PreparedStatement ps = tx.prepareStatement("SELECT pg_backend_pid()");
              ResultSet rs = ps.executeQuery()) {
            rs.next();
            WORKING.add(rs.getInt(1));
          }
          if (!killed.await(120, TimeUnit.SECONDS)) throw new IOException("not terminated");
          TestDb.insertOrder(tx, claim.scope(), claim.key(), "after"); // the connection is gone
        }
      } catch (SQLException | InterruptedException e) {
        throw new IOException(e);
      }
      res.setStatus(201);
      res.setContentType("application/json");
      res.getWriter().write("{\"ok\":true}");
    }
  }

  @Test
  void backendTerminatedDuringTheWork() throws Exception {
    killed = new CountDownLatch(1);
    try (Server s = new Server(new Work(), FilterTest.filter(TestDb.db()))) {
      String key = TestDb.unique("fault");
      ExecutorService pool = Executors.newSingleThreadExecutor();
      try {
        Future<HttpResponse<String>> pending = pool.submit(() -> s.post("/slow", key, "{}"));
        // the handler is inside its work, an order inserted (or it failed: its answer tells)
        Integer pid = null;
        while (pid == null && !pending.isDone()) pid = WORKING.poll(100, TimeUnit.MILLISECONDS);
        if (pid == null) fail("the handler did not reach its work: " + pending.get().body());
        try (Connection admin = TestDb.db().getConnection();
            PreparedStatement ps =
                admin.prepareStatement("SELECT pg_terminate_backend(?, 60000)")) {
          ps.setInt(1, pid);
          try (ResultSet rs = ps.executeQuery()) {
            rs.next();
            assertTrue(rs.getBoolean(1));
          }
        }
        killed.countDown();
        HttpResponse<String> r = pending.get();
        assertEquals(503, r.statusCode());
        assertEquals("1", r.headers().firstValue("Retry-After").orElse(""));
      } finally {
        pool.shutdownNow();
      }
      // nothing half-committed: no order, no claim
      assertEquals(0, TestDb.orders("acct-1", key));
      try (Connection c = TestDb.db().getConnection()) {
        assertNull(Idempotency.lookup(c, "acct-1", key));
      }
      // the service keeps serving, and the retry with the same key runs afresh
      HttpResponse<String> retry = s.post("/fast", key, "{}");
      assertEquals(201, retry.statusCode());
      assertEquals(1, TestDb.orders("acct-1", key));
    }
  }

  @Test
  void aBurstOfOneKeyMakesOneOrder() throws Exception {
    try (Server s = new Server(new Work(), FilterTest.filter(TestDb.db()))) {
      String key = TestDb.unique("burst");
      ExecutorService pool = Executors.newFixedThreadPool(8);
      try {
        CountDownLatch go = new CountDownLatch(1);
        List<Future<HttpResponse<String>>> all = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
          all.add(
              pool.submit(
                  () -> {
                    go.await();
                    return s.post("/fast", key, "{\"item\": \"one\"}");
                  }));
        }
        go.countDown();
        int created = 0;
        for (Future<HttpResponse<String>> f : all) {
          HttpResponse<String> r = f.get();
          boolean replay = r.headers().firstValue("Idempotent-Replayed").isPresent();
          if (r.statusCode() == 201 && !replay) created++;
          else if (r.statusCode() == 409) assertTrue(r.headers().firstValue("Retry-After").isPresent());
          else assertTrue(r.statusCode() == 201 && replay, "unexpected " + r.statusCode() + " " + r.body());
        }
        assertEquals(1, created);
      } finally {
        pool.shutdownNow();
      }
      assertEquals(1, TestDb.orders("acct-1", key));
      // after the burst every retry replays the one order
      HttpResponse<String> after = s.post("/fast", key, "{\"item\": \"one\"}");
      assertEquals("true", after.headers().firstValue("Idempotent-Replayed").orElse(""));
    }
  }

  /**
   * A PostgreSQL restart while 8 clients send requests (IDEM_JAVA_RESTART: the command that
   * restarts the test cluster, given by scripts/test.sh): every request gets an answer, the
   * service recovers, and every key ends with exactly one order.
   */
  @Test
  void aServerRestartWhileRequestsRun() throws Exception {
    String restart = System.getenv("IDEM_JAVA_RESTART");
    org.junit.jupiter.api.Assumptions.assumeTrue(
        restart != null && !restart.isEmpty(), "IDEM_JAVA_RESTART is not set");
    String prefix = TestDb.unique("restart");
    java.util.concurrent.atomic.AtomicInteger done = new java.util.concurrent.atomic.AtomicInteger();
    java.util.concurrent.atomic.AtomicBoolean restarted = new java.util.concurrent.atomic.AtomicBoolean();
    java.util.concurrent.ConcurrentLinkedQueue<String> keys = new java.util.concurrent.ConcurrentLinkedQueue<>();
    try (Server s = new Server(new Work(), FilterTest.filter(TestDb.db()))) {
      ExecutorService pool = Executors.newFixedThreadPool(8);
      try {
        List<Future<Integer>> clients = new ArrayList<>();
        for (int t = 0; t < 8; t++) {
          int client = t;
          clients.add(
              pool.submit(
                  () -> {
                    int afterRestart = 0, n = 0;
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(240);
                    // each client goes on until it has completed 2 keys begun after the restart
                    while (afterRestart < 2) {
                      boolean begunAfter = restarted.get();
                      String key = prefix + "-" + client + "-" + n++;
                      keys.add(key);
                      while (true) { // the same key until it is answered 201
                        if (System.nanoTime() > deadline) throw new IllegalStateException("no recovery");
                        HttpResponse<String> r;
                        try {
                          r = s.post("/fast", key, "{}");
                        } catch (IOException e) {
                          continue; // the service must answer, but a client retries a cut request
                        }
                        if (r.statusCode() == 201) break;
                        assertTrue(
                            r.statusCode() == 503 || r.statusCode() == 409,
                            "unexpected " + r.statusCode() + " " + r.body());
                        Thread.sleep(20); // a client's back-off before its retry
                      }
                      done.incrementAndGet();
                      if (begunAfter) afterRestart++;
                    }
                    return n;
                  }));
        }
        while (done.get() < 8) { // until requests are running and answered
          for (Future<Integer> f : clients) if (f.isDone()) f.get(); // a client that failed
          Thread.sleep(10);
        }
        Process p = new ProcessBuilder("bash", "-c", restart).inheritIO().start();
        assertEquals(0, p.waitFor(), "the restart command failed");
        restarted.set(true);
        for (Future<Integer> f : clients) f.get(300, TimeUnit.SECONDS);
      } finally {
        pool.shutdownNow();
      }
    }
    for (String key : keys) assertEquals(1, TestDb.orders("acct-1", key), key);
  }
}
