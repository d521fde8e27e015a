package idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
        int pid = WORKING.take(); // the handler is inside its work, an order inserted
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
}
