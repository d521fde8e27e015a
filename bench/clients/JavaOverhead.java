// The Java part of bench/clients.sh: the CPU per request of the Java client's runOnce against
// the same statements sent by hand, over pgjdbc and one connection (one backend, whose CPU is
// read from /proc/<pid>/schedstat). Runs as a single source file on the client's class path:
//
//   java -cp build/java/classes:/usr/share/java/postgresql.jar bench/clients/JavaOverhead.java \
//       --bodies DIR --rounds 5 --requests 2000 --block 50 --out result.json
//
// Connects with the PG* environment (over the Unix socket when PGHOST is a directory). Per
// request, both variants fingerprint the 1 KB body with the client's Fingerprint and send the
// same statements in the same round trips:
//   bare    reserve_begin (which opens the transaction), W2's INSERT ... RETURNING id, then
//           complete and COMMIT in one round trip (one prepared text: pgjdbc sends both
//           statements with one Sync)
//   helper  IdempotencyClient.runOnce with the same INSERT as its work
// The variants take turns block by block (--block requests each, the first of each turn
// alternating); a block's process CPU (every thread of the JVM, the JIT and the collector too,
// from /proc/self/task/*/schedstat) and its backend's CPU are divided by its requests. Writes each round's figures per variant
// (microseconds per request) as JSON.

import io.github.pgidempotency.idempotency.Fingerprint;
import io.github.pgidempotency.idempotency.IdempotencyClient;
import io.github.pgidempotency.idempotency.UnixSocketFactory;
import java.lang.reflect.Proxy;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import javax.sql.DataSource;

public class JavaOverhead {
  static final String SCOPE = "bench-clients-java";
  // W2's business write (bench/workloads/w2_extension.sql); clients 1 Python, 2 Node, 3 Go, 4 Java.
  static final String INSERT =
      "INSERT INTO bench.orders (client, amount, note) VALUES (4, ?, 'order') RETURNING id";
  static final String RESERVE_BEGIN =
      "SELECT r.outcome::text, r.status_code, r.response::text, r.attempt, r.recovery_point,"
          + " r.first_seen_at, r.locked_until, r.expires_at FROM idempotency.reserve_begin(?, ?,"
          + " ?::bytea, ?::interval, ?::interval, ?::interval) AS r";
  static final String COMPLETE_COMMIT =
      "SELECT idempotency.complete(?, ?, ?::integer, ?::jsonb, ?::integer); COMMIT";

  static Connection conn; // the one connection, closed at the end
  static Connection shared; // conn as the pool hands it out: close() gives it back
  static IdempotencyClient client;
  static String body;
  static final String RUN = ProcessHandle.current().pid() + "-" + System.nanoTime();
  static int seq;
  static int completed;
  static int backend;

  static String env(String name, String otherwise) {
    String v = System.getenv(name);
    return v == null || v.isEmpty() ? otherwise : v;
  }

  /** The connection of the PG* environment (over the Unix socket when PGHOST is a directory). */
  static Connection connect() throws SQLException {
    String host = env("PGHOST", "/run/postgresql");
    String port = env("PGPORT", "5432");
    Properties props = new Properties();
    props.setProperty("user", env("PGUSER", "postgres"));
    String server = host + ":" + port;
    if (host.startsWith("/")) {
      props.setProperty("socketFactory", UnixSocketFactory.class.getName());
      props.setProperty("socketFactoryArg", host + "/.s.PGSQL." + port);
      server = "localhost:" + port; // unused: the socket factory connects
    }
    return DriverManager.getConnection(
        "jdbc:postgresql://" + server + "/" + env("PGDATABASE", "postgres"), props);
  }

  /** A pool of one connection: every getConnection() is conn, and its close() gives it back. */
  static DataSource poolOfOne() {
    shared =
        (Connection)
            Proxy.newProxyInstance(
                JavaOverhead.class.getClassLoader(),
                new Class<?>[] {Connection.class},
                (proxy, method, args) -> {
                  if (method.getName().equals("close")) return null;
                  try {
                    return method.invoke(conn, args);
                  } catch (java.lang.reflect.InvocationTargetException e) {
                    throw e.getCause();
                  }
                });
    return (DataSource)
        Proxy.newProxyInstance(
            JavaOverhead.class.getClassLoader(),
            new Class<?>[] {DataSource.class},
            (proxy, method, args) -> {
              switch (method.getName()) {
                case "getConnection":
                  return shared;
                case "hashCode": // the client caches what it learns per data source
                  return System.identityHashCode(proxy);
                case "equals":
                  return proxy == args[0];
                case "toString":
                  return "pool of one connection";
                default:
                  throw new UnsupportedOperationException(method.getName());
              }
            });
  }

  static String nextKey(String variant) {
    return RUN + "-" + variant + "-" + (++seq);
  }

  /** A task's time on a CPU (schedstat's first field, nanoseconds), in microseconds. */
  static double schedstat(Path task) throws IOException {
    return Double.parseDouble(Files.readString(task.resolve("schedstat")).strip().split("\\s+")[0])
        / 1000.0;
  }

  /**
   * The JVM's time on a CPU, every thread (the JIT and the collector too), in microseconds: the
   * sum over /proc/self/task, to the nanosecond (the MXBean's process CPU time counts 10 ms
   * ticks).
   */
  static double processCpu() throws IOException {
    double us = 0;
    try (DirectoryStream<Path> tasks = Files.newDirectoryStream(Path.of("/proc/self/task"))) {
      for (Path task : tasks) {
        try {
          us += schedstat(task);
        } catch (IOException | RuntimeException gone) {
          // a thread that ended meanwhile
        }
      }
    }
    return us;
  }

  static double backendCpu() throws IOException {
    return schedstat(Path.of("/proc/" + backend));
  }

  static long insert(Connection c) throws SQLException {
    try (PreparedStatement ps = c.prepareStatement(INSERT)) {
      ps.setInt(1, seq);
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        return rs.getLong(1);
      }
    }
  }

  static void bare() throws Exception {
    String key = nextKey("bare");
    byte[] fp = Fingerprint.of(body);
    Connection c = shared;
    int attempt;
    try (PreparedStatement ps = c.prepareStatement(RESERVE_BEGIN)) {
      ps.setString(1, SCOPE);
      ps.setString(2, key);
      ps.setBytes(3, fp);
      ps.setString(4, "5 minutes");
      ps.setString(5, "24 hours");
      ps.setString(6, "0");
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        if (!"new".equals(rs.getString(1))) {
          throw new IllegalStateException("bare: reserve_begin of a fresh key gave " + rs.getString(1));
        }
        rs.getInt(2);
        rs.getString(3);
        attempt = rs.getInt(4);
        rs.getString(5);
        rs.getObject(6, java.time.OffsetDateTime.class);
        rs.getObject(7, java.time.OffsetDateTime.class);
        rs.getObject(8, java.time.OffsetDateTime.class);
      }
    }
    long id = insert(c);
    try (PreparedStatement ps = c.prepareStatement(COMPLETE_COMMIT)) {
      ps.setString(1, SCOPE);
      ps.setString(2, key);
      ps.setInt(3, 201);
      ps.setString(4, "{\"order_id\":" + id + ",\"status\":\"created\"}");
      ps.setInt(5, attempt);
      ps.execute();
    }
    completed++;
  }

  static void helper() {
    String key = nextKey("helper");
    IdempotencyClient.Result r =
        client.runOnce(
            IdempotencyClient.Request.of(SCOPE, key, body),
            (tx, res) ->
                new IdempotencyClient.Answer(
                    201, "{\"order_id\":" + insert(tx) + ",\"status\":\"created\"}"));
    if (r.replayed() || r.statusCode() != 201) {
      throw new IllegalStateException("helper: a fresh key gave " + r);
    }
    completed++;
  }

  interface Request {
    void run() throws Exception;
  }

  /** A variant's totals over a round. */
  static final class Figures {
    double requests, wall, cpu, backend;

    void block(Request run, int n) throws Exception {
      long w0 = System.nanoTime();
      double c0 = processCpu(), b0 = backendCpu();
      for (int i = 0; i < n; i++) run.run();
      cpu += processCpu() - c0;
      backend += backendCpu() - b0;
      wall += (System.nanoTime() - w0) / 1000.0;
      requests += n;
    }
  }

  static Figures[] takeTurns(int requests, int block) throws Exception {
    Figures b = new Figures(), h = new Figures();
    for (int done = 0, i = 0; done < requests; i++) {
      int n = Math.min(block, requests - done);
      if (i % 2 == 0) {
        b.block(JavaOverhead::bare, n);
        h.block(JavaOverhead::helper, n);
      } else {
        h.block(JavaOverhead::helper, n);
        b.block(JavaOverhead::bare, n);
      }
      done += n;
    }
    return new Figures[] {b, h};
  }

  public static void main(String[] argv) throws Exception {
    Map<String, String> opt = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) opt.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
    int rounds = Integer.parseInt(opt.getOrDefault("rounds", "5"));
    int requests = Integer.parseInt(opt.getOrDefault("requests", "2000"));
    int block = Integer.parseInt(opt.getOrDefault("block", "50"));
    body = Files.readString(Path.of(opt.get("bodies"), "body-1k.json"), StandardCharsets.UTF_8);

    conn = connect();
    client = new IdempotencyClient(poolOfOne());
    try (PreparedStatement ps = conn.prepareStatement("SELECT pg_backend_pid(), idempotency.fingerprint(?::jsonb)")) {
      ps.setString(1, body);
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        backend = rs.getInt(1);
        if (!Arrays.equals(rs.getBytes(2), Fingerprint.of(body))) {
          throw new IllegalStateException("the fingerprint of body-1k: client and server differ");
        }
      }
    }

    // Warm-up (the server's caches, and the JIT, whose compiler threads are counted in the
    // process's CPU): a whole round, not recorded.
    takeTurns(requests, block);
    List<Map<String, Double>> results = new ArrayList<>();
    for (int r = 0; r < rounds; r++) {
      Figures[] f = takeTurns(requests, block);
      Map<String, Double> row = new LinkedHashMap<>();
      row.put("bare_wall", f[0].wall / f[0].requests);
      row.put("helper_wall", f[1].wall / f[1].requests);
      row.put("bare_cpu", f[0].cpu / f[0].requests);
      row.put("helper_cpu", f[1].cpu / f[1].requests);
      row.put("bare_backend_cpu", f[0].backend / f[0].requests);
      row.put("helper_backend_cpu", f[1].backend / f[1].requests);
      results.add(row);
      System.err.printf(
          "  java round %d/%d: process CPU bare %.1f helper %.1f, backend CPU bare %.1f helper %.1f"
              + " (us per request)%n",
          r + 1, rounds, row.get("bare_cpu"), row.get("helper_cpu"), row.get("bare_backend_cpu"),
          row.get("helper_backend_cpu"));
    }
    try (PreparedStatement ps =
        conn.prepareStatement(
            "SELECT count(*) FROM idempotency.keys WHERE scope = ? AND state = 'completed'")) {
      ps.setString(1, SCOPE);
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        if (rs.getInt(1) != completed) {
          throw new IllegalStateException(rs.getInt(1) + " completed keys for " + completed + " requests");
        }
      }
    }
    String driver = conn.getMetaData().getDriverVersion();
    conn.close();

    StringBuilder json = new StringBuilder("{\n \"client\": \"java\",\n \"kind\": \"cpu\",\n");
    json.append(" \"versions\": \"idempotency (clients/java), pgjdbc ").append(driver)
        .append(", Java ").append(System.getProperty("java.version")).append("\",\n");
    json.append(" \"bodies\": {\"1k\": ").append(body.getBytes(StandardCharsets.UTF_8).length).append("},\n");
    json.append(" \"counts\": {\"requests\": ").append(requests).append(", \"block\": ").append(block).append("},\n");
    json.append(" \"rounds\": [\n");
    for (int i = 0; i < results.size(); i++) {
      json.append("  {");
      int j = 0;
      for (Map.Entry<String, Double> e : results.get(i).entrySet()) {
        if (j++ > 0) json.append(", ");
        json.append('"').append(e.getKey()).append("\": ").append(String.format(java.util.Locale.ROOT, "%.3f", e.getValue()));
      }
      json.append(i + 1 < results.size() ? "},\n" : "}\n");
    }
    json.append(" ]\n}\n");
    Files.writeString(Path.of(opt.get("out")), json);
  }
}
