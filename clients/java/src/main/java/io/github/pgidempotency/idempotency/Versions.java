package io.github.pgidempotency.idempotency;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Arrays;
import java.util.Collections;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.WeakHashMap;
import javax.sql.DataSource;

/**
 * The server's edition: the C++ extension or the managed edition (SQL and PL/pgSQL, for
 * managed databases that load no library), its version and what it offers, told by one
 * statement (the "edition" statement of test/vectors/statements.json) that raises nothing
 * whatever is installed. Cached per connection or data source.
 */
public final class Versions {
  private Versions() {}

  /** Edition names: the C++ extension, and the managed edition. */
  public static final String EXTENSION = "extension", MANAGED = "managed";

  /** How an edition was installed: CREATE EXTENSION (through pg_tle for the managed one). */
  public static final String INSTALLED_AS_EXTENSION = "extension";

  /** How an edition was installed: the managed edition's script run with psql -f. */
  public static final String INSTALLED_AS_SCRIPT = "script";

  /**
   * What the server offers. {@code name}: {@link #EXTENSION}, {@link #MANAGED} or null (neither
   * is installed in the database); {@code version}: null when not installed; {@code
   * installedAs}: {@link #INSTALLED_AS_EXTENSION}, {@link #INSTALLED_AS_SCRIPT} or null; {@code
   * functions}: the names of the functions of schema idempotency the session may execute.
   */
  public record Edition(String name, String version, String installedAs, Set<String> functions) {
    public Edition {
      functions = Collections.unmodifiableSet(new TreeSet<>(functions));
    }

    /**
     * Whether the server has idempotency.{@code function} and the session may execute it (the
     * managed edition has no reserve_begin, emit or stats; an extension before 0.3.0 no
     * claim_once).
     */
    public boolean offers(String function) {
      return functions.contains(function);
    }
  }

  private static final Map<Object, Edition> DETECTED =
      Collections.synchronizedMap(new WeakHashMap<>());

  /**
   * Asks the server of c for its edition: one statement, not cached (in the transaction of c if
   * one is open).
   */
  public static Edition detect(Connection c) {
    RoundTrips.note();
    try (Statement s = c.createStatement();
        ResultSet rs = s.executeQuery(Statements.EDITION)) {
      rs.next();
      String functions = rs.getString(4);
      return new Edition(
          rs.getString(1),
          rs.getString(2),
          rs.getString(3),
          new TreeSet<>(
              functions.isEmpty() ? Set.of() : Arrays.asList(functions.split(" "))));
    } catch (SQLException e) {
      throw IdempotencyException.from(e);
    }
  }

  /**
   * The edition of the database of c: one statement the first time, cached for that
   * connection object from then on. A pool's connection objects may be new at each checkout:
   * {@link #edition(DataSource)} caches per pool.
   */
  public static Edition edition(Connection c) {
    return cached(c, c);
  }

  /**
   * The edition of the database of ds (a pool, or any data source: its connections share a
   * database and a role): one statement on one of its connections the first time, cached for
   * ds from then on. {@link #refresh(DataSource)} asks again (after ALTER EXTENSION UPDATE or a
   * move between editions).
   */
  public static Edition edition(DataSource ds) {
    Edition e = DETECTED.get(ds);
    return e != null ? e : refresh(ds);
  }

  /**
   * The edition of the database of ds, cached for ds, asked the first time on c, a connection
   * of ds the caller holds (so that a pool of one connection does not wait for itself).
   */
  static Edition edition(DataSource ds, Connection c) {
    return cached(ds, c);
  }

  /** The edition cached for key, or asked on c (and cached for key) the first time. */
  private static Edition cached(Object key, Connection c) {
    Edition e = DETECTED.get(key);
    if (e == null) {
      e = detect(c);
      DETECTED.put(key, e);
    }
    return e;
  }

  /** Asks the server of ds again, and caches its answer. */
  public static Edition refresh(DataSource ds) {
    Edition e;
    try (Connection c = ds.getConnection()) {
      e = detect(c);
    } catch (SQLException ex) {
      throw IdempotencyException.from(ex);
    }
    DETECTED.put(ds, e);
    return e;
  }
}
