package io.github.pgidempotency.idempotency;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.concurrent.atomic.AtomicBoolean;
import javax.sql.DataSource;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * Test scaffolding: a database of its own (javaclient) on the cluster of the PG* environment
 * (scripts/test.sh's test cluster, reached over its Unix socket with {@link UnixSocketFactory}
 * when PGHOST is a directory), created afresh once per run.
 */
final class TestDb {
  static final String DB = "javaclient";
  private static final AtomicBoolean READY = new AtomicBoolean();

  private TestDb() {}

  static String env(String name, String otherwise) {
    String v = System.getenv(name);
    return v == null || v.isEmpty() ? otherwise : v;
  }

  static PGSimpleDataSource dataSource(String database) {
    String host = env("PGHOST", "/tmp");
    int port = Integer.parseInt(env("PGPORT", "5432"));
    PGSimpleDataSource ds = new PGSimpleDataSource();
    ds.setUser(env("PGUSER", "postgres"));
    ds.setDatabaseName(database);
    ds.setPortNumbers(new int[] {port});
    if (host.startsWith("/")) {
      ds.setServerNames(new String[] {"localhost"});
      ds.setSocketFactory(UnixSocketFactory.class.getName());
      ds.setSocketFactoryArg(host + "/.s.PGSQL." + port);
    } else {
      ds.setServerNames(new String[] {host});
    }
    return ds;
  }

  /** A data source whose every connection fails: nothing listens on its socket. */
  static DataSource unreachable() {
    PGSimpleDataSource ds = dataSource(DB);
    ds.setSocketFactoryArg("/nonexistent/idempotency-java/.s.PGSQL.1");
    return ds;
  }

  /** The test database, created on first use. */
  static synchronized DataSource db() throws SQLException {
    if (READY.compareAndSet(false, true)) {
      try (Connection c = dataSource("postgres").getConnection();
          Statement s = c.createStatement()) {
        s.execute("DROP DATABASE IF EXISTS " + DB + " WITH (FORCE)");
        s.execute("CREATE DATABASE " + DB);
      }
      try (Connection c = dataSource(DB).getConnection();
          Statement s = c.createStatement()) {
        s.execute("CREATE EXTENSION idempotency");
        s.execute(
            "CREATE TABLE orders (id bigserial PRIMARY KEY, scope text NOT NULL,"
                + " key text NOT NULL, item text)");
        s.execute("SELECT idempotency.create_stream('java_stream')");
      }
    }
    return dataSource(DB);
  }

  static long count(String sql, Object... args) throws SQLException {
    try (Connection c = db().getConnection();
        PreparedStatement ps = c.prepareStatement(sql)) {
      for (int i = 0; i < args.length; i++) ps.setObject(i + 1, args[i]);
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        return rs.getLong(1);
      }
    }
  }

  static long orders(String scope, String key) throws SQLException {
    return count("SELECT count(*) FROM orders WHERE scope = ? AND key = ?", scope, key);
  }

  static void insertOrder(Connection tx, String scope, String key, String item)
      throws SQLException {
    try (PreparedStatement ps =
        tx.prepareStatement("INSERT INTO orders (scope, key, item) VALUES (?, ?, ?)")) {
      ps.setString(1, scope);
      ps.setString(2, key);
      ps.setString(3, item);
      ps.executeUpdate();
    }
  }

  static String unique(String prefix) {
    return prefix + "-" + System.nanoTime();
  }

  /** Removes a directory the tests made, with everything in it. */
  static void removeTree(java.nio.file.Path dir) throws java.io.IOException {
    if (!java.nio.file.Files.exists(dir)) return;
    try (java.util.stream.Stream<java.nio.file.Path> paths = java.nio.file.Files.walk(dir)) {
      for (java.nio.file.Path p :
          paths.sorted(java.util.Comparator.reverseOrder()).toList()) {
        java.nio.file.Files.delete(p);
      }
    }
  }

  /**
   * The class path of the client and its dependencies, for the tests that compile or run other
   * sources: IDEM_JAVA_CLASSPATH (build.sh sets it), else this JVM's own (Maven's Surefire,
   * which passes it whole: useManifestOnlyJar is off).
   */
  static String classPath() {
    String fromBuild = System.getenv("IDEM_JAVA_CLASSPATH");
    return fromBuild != null ? fromBuild : System.getProperty("java.class.path");
  }
}
