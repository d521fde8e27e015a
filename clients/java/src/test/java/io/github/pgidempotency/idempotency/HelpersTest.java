package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.pgidempotency.idempotency.IdempotencyClient.Answer;
import io.github.pgidempotency.idempotency.IdempotencyClient.Request;
import io.github.pgidempotency.idempotency.IdempotencyClient.Result;
import java.sql.Connection;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

class HelpersTest {
  @Test
  void theClaimListenerSeesEachOutcome() throws Exception {
    IdempotencyClient client = new IdempotencyClient(TestDb.db());
    List<IdempotencyClient.ClaimEvent> events = new CopyOnWriteArrayList<>();
    client.setClaimListener(events::add, false);
    String scope = TestDb.unique("listener");
    Request req = Request.of(scope, "order-1", "{\"item\": \"book\"}");
    IdempotencyClient.Work work = (tx, r) -> new Answer(201, "{\"ok\": true}");
    client.runOnce(req, work);
    client.runOnce(req, work);
    IdempotencyException mismatch = assertThrows(IdempotencyException.KeyMismatch.class,
        () -> client.runOnce(Request.of(scope, "order-1", "{\"item\": \"pen\"}"), work));
    client.setClaimListener(
        e -> {
          events.add(e);
          throw new IllegalStateException("a listener's bug");
        },
        true);
    try (Connection holder = TestDb.db().getConnection()) {
      holder.setAutoCommit(false);
      Idempotency.reserve(holder, scope, "held", null, null);
      IdempotencyException inProgress = assertThrows(IdempotencyException.KeyInProgress.class,
          () -> client.runOnceStatement(Request.of(scope, "held", null),
              IdempotencyClient.OneStatement.of("SELECT 1")));
      holder.rollback();
      assertEquals(4, events.size());
      String[][] want = {
        {"runOnce", "new", null}, {"runOnce", "replay", null}, {"runOnce", "mismatch", null},
        {"runOnceStatement", "in_progress", "held"}
      };
      for (int i = 0; i < want.length; i++) {
        IdempotencyClient.ClaimEvent e = events.get(i);
        assertEquals(want[i][0], e.helper(), "event " + i);
        assertEquals(want[i][1], e.outcome(), "event " + i);
        assertEquals(want[i][2], e.key(), "event " + i);
        assertEquals(scope, e.scope());
        assertTrue(e.nanos() > 0);
      }
      assertEquals(1, events.get(0).attempt());
      assertNull(events.get(1).error());
      assertEquals(mismatch, events.get(2).error());
      assertEquals(inProgress, events.get(3).error());
    }
  }

  @Test
  void theClaimListenerSeesTheConsumers() throws Exception {
    IdempotencyClient client = new IdempotencyClient(TestDb.db());
    List<IdempotencyClient.ClaimEvent> events = new CopyOnWriteArrayList<>();
    client.setClaimListener(events::add, true);
    String scope = TestDb.unique("listener_queue");
    String consumer = TestDb.unique("listener_stream");
    IdempotencyClient.Apply apply = tx -> {};
    assertTrue(client.consumeOnce(scope, "m-1", apply));
    assertFalse(client.consumeOnce(scope, "m-1", apply));
    IdempotencyException inProgress;
    try (Connection holder = TestDb.db().getConnection()) {
      holder.setAutoCommit(false);
      Idempotency.reserve(holder, scope, "m-held", null, null);
      inProgress = assertThrows(IdempotencyException.KeyInProgress.class,
          () -> client.consumeOnce(scope, "m-held", apply));
      holder.rollback();
    }
    assertTrue(client.applyOnce(consumer, "p0", 7, apply));
    assertFalse(client.applyOnce(consumer, "p0", 7, apply));
    String[][] want = {
      {"consumeOnce", scope, "m-1", "new"}, {"consumeOnce", scope, "m-1", "replay"},
      {"consumeOnce", scope, "m-held", "in_progress"},
      {"applyOnce", consumer, "p0@7", "new"}, {"applyOnce", consumer, "p0@7", "replay"}
    };
    assertEquals(want.length, events.size(), events.toString());
    for (int i = 0; i < want.length; i++) {
      IdempotencyClient.ClaimEvent e = events.get(i);
      assertEquals(want[i][0], e.helper(), "event " + i);
      assertEquals(want[i][1], e.scope(), "event " + i);
      assertEquals(want[i][2], e.key(), "event " + i);
      assertEquals(want[i][3], e.outcome(), "event " + i);
    }
    assertEquals(inProgress, events.get(2).error());
    assertNull(events.get(3).error());
  }

  @Test
  void runOnceRunsTheWorkOnceAndReplays() throws Exception {
    IdempotencyClient client = new IdempotencyClient(TestDb.db());
    String scope = TestDb.unique("helpers");
    AtomicInteger runs = new AtomicInteger();
    Request req = Request.of(scope, "order-1", "{\"item\": \"book\"}");
    IdempotencyClient.Work work =
        (tx, r) -> {
          runs.incrementAndGet();
          TestDb.insertOrder(tx, scope, "order-1", "book");
          return new Answer(201, "{\"ok\": true}");
        };
    Result first = client.runOnce(req, work);
    assertFalse(first.replayed());
    assertEquals(201, first.statusCode());
    Result second = client.runOnce(req, work);
    assertTrue(second.replayed());
    assertEquals(201, second.statusCode());
    assertEquals("{\"ok\":true}", Json.compact(second.response()));
    assertEquals(1, runs.get());
    assertEquals(1, TestDb.orders(scope, "order-1"));
    assertThrows(
        IdempotencyException.KeyMismatch.class,
        () -> client.runOnce(Request.of(scope, "order-1", "{\"item\": \"pen\"}"), work));
  }

  @Test
  void aFailingWorkLeavesNothing() throws Exception {
    IdempotencyClient client = new IdempotencyClient(TestDb.db());
    String scope = TestDb.unique("helpers");
    Request req = Request.of(scope, "k", "{}");
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () ->
                client.runOnce(
                    req,
                    (tx, r) -> {
                      TestDb.insertOrder(tx, scope, "k", "x");
                      throw new IllegalStateException("boom");
                    }));
    assertEquals("boom", e.getMessage());
    assertEquals(0, TestDb.orders(scope, "k"));
    try (Connection c = TestDb.db().getConnection()) {
      assertNull(Idempotency.lookup(c, scope, "k"));
    }
    Result ok = client.runOnce(req, (tx, r) -> new Answer(200, null));
    assertFalse(ok.replayed());
  }

  @Test
  void runOnceInJoinsTheCallersTransaction() throws Exception {
    String scope = TestDb.unique("helpers");
    try (Connection tx = TestDb.db().getConnection()) {
      tx.setAutoCommit(false);
      Result r =
          IdempotencyClient.runOnceIn(
              tx,
              Request.of(scope, "j", "{}"),
              (c, res) -> {
                TestDb.insertOrder(c, scope, "j", "x");
                return new Answer(201, "{}");
              });
      assertFalse(r.replayed());
      tx.rollback(); // the caller's rollback takes the claim and the work with it
    }
    assertEquals(0, TestDb.orders(scope, "j"));
    try (Connection c = TestDb.db().getConnection()) {
      assertNull(Idempotency.lookup(c, scope, "j"));
    }
  }

  @Test
  void runExternalFencesTheAttempt() throws Exception {
    IdempotencyClient client = new IdempotencyClient(TestDb.db());
    String scope = TestDb.unique("external");
    Request req = Request.of(scope, "pay-1", "{\"amount\": 5}");
    // the external work fails once: the claim is released with fail, the next attempt is 2
    assertThrows(
        IllegalStateException.class,
        () ->
            client.runExternal(
                req,
                null,
                a -> {
                  a.checkpoint("called-provider");
                  throw new IllegalStateException("provider timeout");
                }));
    Result r =
        client.runExternal(
            req,
            (tx, answer) -> {
              TestDb.insertOrder(tx, scope, "pay-1", "paid");
              return answer;
            },
            a -> {
              assertEquals(2, a.attempt());
              assertEquals("called-provider", a.recoveryPoint());
              return new Answer(201, "{\"paid\": true}");
            });
    assertEquals(2, r.attempt());
    assertTrue(client.runExternal(req, null, a -> new Answer(500, null)).replayed());
    assertEquals(1, TestDb.orders(scope, "pay-1"));

    // a holder whose lease was taken over cannot complete: its finish writes roll back
    String key = "pay-2";
    Request req2 = Request.of(scope, key, "{}");
    IdempotencyException e =
        assertThrows(
            IdempotencyException.StaleAttempt.class,
            () ->
                client.runExternal(
                    req2,
                    (tx, answer) -> {
                      TestDb.insertOrder(tx, scope, key, "late");
                      return answer;
                    },
                    a -> {
                      try (Connection c = TestDb.db().getConnection()) {
                        // another holder takes over (as after the lease lapsed)
                        Idempotency.fail(c, scope, key, null, a.attempt());
                        assertEquals(
                            Outcome.NEW, Idempotency.reserve(c, scope, key, null, null).outcome());
                      }
                      return new Answer(201, null);
                    }));
    assertEquals("IK001", e.sqlState());
    assertEquals(0, TestDb.orders(scope, key));
  }

  @Test
  void consumeOnceAndApplyOnce() throws Exception {
    IdempotencyClient client = new IdempotencyClient(TestDb.db());
    String scope = TestDb.unique("consume");
    AtomicInteger applied = new AtomicInteger();
    IdempotencyClient.Apply apply =
        tx -> {
          applied.incrementAndGet();
          TestDb.insertOrder(tx, scope, "m", "msg");
        };
    assertTrue(client.consumeOnce(scope, "m-1", apply));
    assertFalse(client.consumeOnce(scope, "m-1", apply));
    assertTrue(client.applyOnce(scope, "p", 10, apply));
    assertFalse(client.applyOnce(scope, "p", 10, apply));
    assertFalse(client.applyOnce(scope, "p", 9, apply));
    assertTrue(client.applyOnce(scope, "p", 11, apply));
    assertEquals(3, applied.get());
    assertEquals(3, TestDb.orders(scope, "m"));
    // a failing apply rolls the claim back: the redelivery applies
    assertThrows(
        IllegalStateException.class,
        () ->
            client.consumeOnce(
                scope,
                "m-2",
                tx -> {
                  throw new IllegalStateException("x");
                }));
    assertTrue(client.consumeOnce(scope, "m-2", apply));
  }

  @Test
  void anUnreachableDatabaseIsConnectionLost() {
    IdempotencyClient client = new IdempotencyClient(TestDb.unreachable());
    IdempotencyException e =
        assertThrows(
            IdempotencyException.ConnectionLost.class,
            () -> client.runOnce(Request.of("s", "k", "{}"), (tx, r) -> new Answer(200, null)));
    assertEquals(503, e.httpStatus());
  }
}
