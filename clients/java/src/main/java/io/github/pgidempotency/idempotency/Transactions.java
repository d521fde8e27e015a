package io.github.pgidempotency.idempotency;

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.time.Duration;
import java.time.ZonedDateTime;
import java.time.temporal.TemporalAccessor;
import java.util.Collection;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import javax.sql.DataSource;

/**
 * The transaction helpers: the claim (reserve_begin, or BEGIN + reserve on a server that
 * refuses it), run once (claim, work and answer in one transaction, on a connection of the
 * pool or in the caller's transaction), the answer stored with COMMIT in one round trip, the
 * one-statement form (execute_once: claim, statement and answer in one round trip), and the
 * cross-transaction helper for an external side effect (lease, attempt fence).
 * {@link IdempotencyClient} is their public face.
 */
final class Transactions {
  private Transactions() {}

  /**
   * Claims the key on c, a connection with no transaction open: reserve_begin, one round trip
   * that opens the transaction only for the outcome new; on a server that refuses it, BEGIN +
   * reserve (one round trip too, which leaves a transaction open whatever the outcome). For the
   * outcome new, c is left with auto-commit off in the claim's transaction. reserve_begin is
   * sent only where the server offers it (its edition, asked once per ds on c: the managed
   * edition and a server before 0.3.0 have none).
   */
  static Reservation claim(
      DataSource ds,
      Connection c,
      String scope,
      String key,
      byte[] hash,
      Idempotency.ReserveOptions o,
      Features features)
      throws SQLException {
    if (!features.noReserveBegin.get()) {
      if (!c.getAutoCommit()) c.setAutoCommit(true);
      if (Versions.edition(ds, c).offers("reserve_begin")) {
        try {
          Reservation r = Keys.reserveBegin(c, scope, key, hash, o);
          // the server opened the transaction: JDBC's view follows it (pgjdbc sends nothing)
          if (r.outcome() == Outcome.NEW) c.setAutoCommit(false);
          return r;
        } catch (IdempotencyException e) {
          if (!Keys.reserveBeginRefused(e)) throw e;
          features.noReserveBegin.set(true);
        }
      }
    }
    c.setAutoCommit(false); // pgjdbc sends BEGIN with the reserve, in its round trip
    return Keys.reserve(c, scope, key, hash, o);
  }

  /**
   * Stores the answer and commits: complete and COMMIT in one round trip. On an error the
   * transaction is rolled back (nothing of the work commits); a connection that broke during
   * the COMMIT may have committed, and a retry with the same key tells (it replays).
   */
  static void finish(
      Connection c, String scope, String key, int status, String response, int attempt) {
    try {
      Connections.thenCommit(
          c, Statements.COMPLETE, scope, key, status, response, Keys.fence(attempt));
    } catch (SQLException | RuntimeException e) {
      Connections.rollback(c);
      throw Connections.translate(e);
    }
  }

  static IdempotencyClient.Result runOnce(
      DataSource ds, Features features, IdempotencyClient.Request req, IdempotencyClient.Work work) {
    byte[] hash = req.requestHash();
    Keys.checkNames(req.scope(), req.key());
    Connection c = Connections.connect(ds);
    try {
      Reservation r = claim(ds, c, req.scope(), req.key(), hash, req.options(), features);
      if (r.outcome() != Outcome.NEW) {
        Connections.rollback(c); // BEGIN + reserve opened one; reserve_begin did not
        if (r.outcome() == Outcome.REPLAY) {
          return new IdempotencyClient.Result(r.statusCode(), r.response(), true, r.attempt());
        }
        throw r.error(req.scope(), req.key());
      }
      IdempotencyClient.Answer a;
      try {
        a = work.run(c, r);
      } catch (Throwable e) {
        Connections.rollback(c);
        throw Connections.translate(e);
      }
      finish(c, req.scope(), req.key(), a.statusCode(), a.response(), r.attempt());
      return new IdempotencyClient.Result(a.statusCode(), a.response(), false, r.attempt());
    } catch (SQLException e) {
      Connections.rollback(c);
      throw IdempotencyException.from(e);
    } finally {
      Connections.close(c);
    }
  }

  static IdempotencyClient.Result runOnceIn(
      Connection tx, IdempotencyClient.Request req, IdempotencyClient.Work work) {
    byte[] hash = req.requestHash();
    Keys.checkNames(req.scope(), req.key());
    Savepoint sp;
    try {
      sp = tx.setSavepoint();
    } catch (SQLException e) {
      throw IdempotencyException.from(e);
    }
    try {
      Reservation r = Keys.reserve(tx, req.scope(), req.key(), hash, req.options());
      IdempotencyClient.Result res;
      if (r.outcome() == Outcome.REPLAY) {
        tx.rollback(sp);
        res = new IdempotencyClient.Result(r.statusCode(), r.response(), true, r.attempt());
      } else if (r.outcome() != Outcome.NEW) {
        throw r.error(req.scope(), req.key());
      } else {
        IdempotencyClient.Answer a = work.run(tx, r);
        Keys.complete(tx, req.scope(), req.key(), a.statusCode(), a.response(), r.attempt());
        res = new IdempotencyClient.Result(a.statusCode(), a.response(), false, r.attempt());
      }
      tx.releaseSavepoint(sp);
      return res;
    } catch (Throwable e) {
      try {
        tx.rollback(sp);
        tx.releaseSavepoint(sp);
      } catch (SQLException ignored) {
        // the connection is gone, or the caller's transaction ends anyway
      }
      throw Connections.translate(e);
    }
  }

  static IdempotencyClient.Result runExternal(
      IdempotencyClient client,
      IdempotencyClient.Request req,
      IdempotencyClient.Finish finish,
      IdempotencyClient.ExternalWork work) {
    byte[] hash = req.requestHash();
    Keys.checkNames(req.scope(), req.key());
    DataSource ds = client.dataSource();
    Reservation r;
    Connection c = Connections.connect(ds);
    try {
      r = Keys.reserve(c, req.scope(), req.key(), hash, req.options()); // auto-commit
    } finally {
      Connections.close(c);
    }
    if (r.outcome() == Outcome.REPLAY) {
      return new IdempotencyClient.Result(r.statusCode(), r.response(), true, r.attempt());
    }
    if (r.outcome() != Outcome.NEW) throw r.error(req.scope(), req.key());
    IdempotencyClient.Attempt attempt = client.new Attempt(req, r);
    IdempotencyClient.Answer a;
    try {
      a = work.run(attempt);
    } catch (Throwable e) {
      release(ds, req, r.attempt(), e);
      throw Connections.translate(e);
    }
    c = Connections.connect(ds);
    try {
      c.setAutoCommit(false);
      IdempotencyClient.Answer stored = finish == null ? a : finish.run(c, a);
      finish(c, req.scope(), req.key(), stored.statusCode(), stored.response(), r.attempt());
      return new IdempotencyClient.Result(
          stored.statusCode(), stored.response(), false, r.attempt());
    } catch (Throwable e) {
      Connections.rollback(c);
      boolean stale =
          e instanceof SQLException s
              ? IdempotencyException.from(s) instanceof IdempotencyException.StaleAttempt
              : e instanceof IdempotencyException.StaleAttempt;
      if (!stale) release(ds, req, r.attempt(), e);
      throw Connections.translate(e);
    } finally {
      Connections.close(c);
    }
  }

  /** Releases the claim with fail after a failed attempt (the next reserve gets attempt + 1). */
  private static void release(
      DataSource ds, IdempotencyClient.Request req, int attempt, Throwable why) {
    String info =
        "{\"error\":"
            + Json.quote(why.getClass().getSimpleName())
            + ",\"message\":"
            + Json.quote(String.valueOf(why.getMessage()))
            + "}";
    try {
      Connection c = Connections.connect(ds);
      try {
        Keys.fail(c, req.scope(), req.key(), info, attempt);
      } finally {
        Connections.close(c);
      }
    } catch (IdempotencyException ignored) {
      // the lease lapses by itself; the next holder gets attempt + 1
    }
  }

  /**
   * execute_once on c: the claim, the statement (its parameters bound as text, see
   * {@link #statementParams}) and its answer in one statement, in c's transaction or, under
   * auto-commit, committed together. A server without execute_once (before 0.3.0, or the
   * managed edition) is an error naming it (42883).
   */
  static Reservation executeOnce(Connection c, String scope, String key, byte[] requestHash,
      String statement, List<?> params, int statusCode, Idempotency.ReserveOptions o) {
    Keys.checkNames(scope, key);
    if (o == null) o = Idempotency.ReserveOptions.DEFAULTS;
    String[] values = statementParams(params);
    try (PreparedStatement ps = c.prepareStatement(Statements.EXECUTE_ONCE)) {
      Connections.bind(ps, scope, key, requestHash, statement);
      ps.setArray(5, c.createArrayOf("text", values));
      ps.setInt(6, statusCode == 0 ? 201 : statusCode);
      ps.setString(7, o.lockTtlText());
      ps.setString(8, o.retentionText());
      ps.setString(9, o.waitText());
      RoundTrips.note();
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        return Keys.reservation(rs);
      }
    } catch (SQLException e) {
      IdempotencyException t = IdempotencyException.from(e);
      if (IdempotencyException.UNDEFINED_FUNCTION.equals(t.sqlState())
          && String.valueOf(e.getMessage()).contains("idempotency.execute_once(")) {
        throw new IdempotencyException(
            IdempotencyException.UNDEFINED_FUNCTION,
            "the server has no idempotency.execute_once (the one-statement form): it needs the"
                + " extension 0.3.0 or later, and the managed edition does not offer it; update"
                + " the extension, or use runOnce (reserve, the work, complete)",
            e);
      }
      throw t;
    }
  }

  /**
   * The values of a statement's $1, $2, ... as the texts execute_once binds (the server
   * converts each to the type the statement gives it): null is NULL; strings as they are;
   * numbers in decimal (NaN, Infinity, -Infinity); booleans true / false; java.time values in
   * ISO 8601 (a Duration as an interval); java.util.Date and java.sql.Timestamp as instants;
   * UUIDs; enums by name; byte[] as bytea's hex form; maps, collections and arrays as JSON.
   * Anything else is refused (IllegalArgumentException).
   */
  static String[] statementParams(List<?> params) {
    if (params == null) return new String[0];
    String[] out = new String[params.size()];
    for (int i = 0; i < out.length; i++) {
      try {
        out[i] = paramText(params.get(i));
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("parameter $" + (i + 1) + ": " + e.getMessage(), e);
      }
    }
    return out;
  }

  private static String paramText(Object v) {
    if (v == null) return null;
    if (v instanceof CharSequence s) return s.toString();
    if (v instanceof Boolean b) return b.toString();
    if (v instanceof BigDecimal d) return d.toPlainString();
    if (v instanceof Double || v instanceof Float) {
      double d = ((Number) v).doubleValue();
      if (Double.isNaN(d)) return "NaN";
      if (Double.isInfinite(d)) return d > 0 ? "Infinity" : "-Infinity";
      return v.toString();
    }
    if (v instanceof Number n) return n.toString();
    if (v instanceof Duration d) {
      return d.getSeconds() + " seconds " + d.getNano() / 1000 + " microseconds";
    }
    if (v instanceof ZonedDateTime z) return z.toOffsetDateTime().toString();
    if (v instanceof TemporalAccessor t) return t.toString();
    if (v instanceof java.util.Date d) return d.toInstant().toString();
    if (v instanceof UUID u) return u.toString();
    if (v instanceof Enum<?> e) return e.name();
    if (v instanceof byte[] b) return "\\x" + HexFormat.of().formatHex(b);
    if (v instanceof Map<?, ?> || v instanceof Collection<?> || v.getClass().isArray()) {
      return Json.write(v);
    }
    throw new IllegalArgumentException(
        "a " + v.getClass().getName() + " cannot be sent as a statement's parameter");
  }

  /** The result of execute_once's outcome: new or replay, or the outcome's error. */
  private static IdempotencyClient.Result statementResult(
      Reservation r, IdempotencyClient.Request req) {
    if (r.outcome() == Outcome.NEW || r.outcome() == Outcome.REPLAY) {
      return new IdempotencyClient.Result(
          r.statusCode(), r.response(), r.outcome() == Outcome.REPLAY, r.attempt());
    }
    throw r.error(req.scope(), req.key());
  }

  static IdempotencyClient.Result runOnceStatement(
      DataSource ds, IdempotencyClient.Request req, IdempotencyClient.OneStatement st) {
    byte[] hash = req.requestHash();
    Keys.checkNames(req.scope(), req.key());
    Connection c = Connections.connect(ds);
    try {
      if (!c.getAutoCommit()) c.setAutoCommit(true);
      return runOnceStatementIn(c, req, st, hash);
    } catch (SQLException e) {
      throw IdempotencyException.from(e);
    } finally {
      Connections.close(c);
    }
  }

  static IdempotencyClient.Result runOnceStatementIn(
      Connection c,
      IdempotencyClient.Request req,
      IdempotencyClient.OneStatement st,
      byte[] hash) {
    Reservation r =
        executeOnce(
            c, req.scope(), req.key(), hash, st.sql(), st.params(), st.statusCode(), req.options());
    return statementResult(r, req);
  }
}
