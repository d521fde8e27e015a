// The orders API of docs/http.md on the Java client: POST /orders behind the Idempotency-Key
// filter (a bearer token names the account: alice-token, bob-token), GET /healthz. Runs as a
// single source file on the client's class path (docs/clients-java.md):
//   java -cp "build/java/idempotency-client.jar:/usr/share/java/postgresql.jar:<tomcat jars>" \
//     examples/http-java/OrdersService.java
// It connects with the PG* environment (over the Unix socket when PGHOST is a directory),
// creates its orders table at start and prints "listening on http://127.0.0.1:PORT" (PORT:
// the environment's, default 3002; 0 picks a free one).

import io.github.pgidempotency.idempotency.IdempotencyFilter;
import io.github.pgidempotency.idempotency.UnixSocketFactory;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Map;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.apache.catalina.Context;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.util.descriptor.web.FilterDef;
import org.apache.tomcat.util.descriptor.web.FilterMap;
import org.postgresql.ds.PGSimpleDataSource;

public class OrdersService {
  static final Map<String, String> TOKENS = Map.of("alice-token", "acct_alice", "bob-token", "acct_bob");

  /**
   * The orders schema all the orders examples apply at start, the Node example's
   * (examples/http-node/schema.sql, found beside this source file, which is the code source
   * java's source launcher gives its class); ORDERS_SCHEMA names another file.
   */
  static String schema() throws Exception {
    String file = env("ORDERS_SCHEMA", null);
    Path path;
    if (file != null) {
      path = Path.of(file);
    } else {
      Path source = Path.of(OrdersService.class.getProtectionDomain().getCodeSource().getLocation().toURI());
      path = source.toAbsolutePath().getParent().resolve("../http-node/schema.sql").normalize();
    }
    return Files.readString(path);
  }

  // The body is a bound jsonb parameter, read by SQL; the catalog prices the item.
  static final String INSERT =
      """
      INSERT INTO orders (account, idempotency_key, item, quantity, total_cents, note)
      SELECT ?, ?, o.item, o.quantity, c.cents * o.quantity, o.note
        FROM jsonb_to_record(?::jsonb) AS o(item text, quantity integer, note text)
        JOIN (VALUES ('widget', 250), ('gadget', 1200), ('gizmo', 75)) AS c(item, cents)
          ON c.item = o.item
       WHERE o.quantity BETWEEN 1 AND 1000
      RETURNING id, json_build_object('id', id, 'item', item, 'quantity', quantity,
        'total_cents', total_cents, 'note', note)::jsonb::text""";

  static String env(String name, String otherwise) {
    String v = System.getenv(name);
    return v == null || v.isEmpty() ? otherwise : v;
  }

  static PGSimpleDataSource dataSource() {
    String host = env("PGHOST", "/run/postgresql");
    int port = Integer.parseInt(env("PGPORT", "5432"));
    PGSimpleDataSource ds = new PGSimpleDataSource();
    ds.setUser(env("PGUSER", "postgres"));
    ds.setDatabaseName(env("PGDATABASE", "postgres"));
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

  static void problem(HttpServletResponse res, int status, String code, String message) throws IOException {
    res.setStatus(status);
    res.setContentType("application/json");
    res.getWriter().write("{\"error\":\"" + code + "\",\"message\":\"" + message + "\"}");
  }

  /** POST /orders, inside the claim's transaction: the order and the answer commit together. */
  static final class Orders extends HttpServlet {
    @Override
    protected void doPost(HttpServletRequest req, HttpServletResponse res) throws IOException {
      IdempotencyFilter.Claim claim = IdempotencyFilter.claim(req);
      String body = new String(req.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      try (PreparedStatement ps = claim.transaction().prepareStatement(INSERT)) {
        ps.setString(1, claim.scope());
        ps.setString(2, claim.key());
        ps.setString(3, body.trim().startsWith("{") ? body : "{}");
        try (ResultSet rs = ps.executeQuery()) {
          if (!rs.next()) {
            problem(res, 400, "invalid_order", "an order is {item: widget|gadget|gizmo, quantity: 1..1000}");
            return;
          }
          res.setStatus(201);
          res.setContentType("application/json");
          res.setHeader("Location", "/orders/" + rs.getLong(1));
          res.getWriter().write(rs.getString(2));
        }
      } catch (SQLException e) {
        // a lost connection becomes 503; anything else 500 (not stored: a retry runs afresh)
        throw new IOException(e);
      }
    }
  }

  static final class Health extends HttpServlet {
    @Override
    protected void doGet(HttpServletRequest req, HttpServletResponse res) throws IOException {
      res.setContentType("text/plain");
      res.getWriter().write("ok");
    }
  }

  public static void main(String[] args) throws Exception {
    Logger.getLogger("org.apache").setLevel(Level.WARNING);
    PGSimpleDataSource pool = dataSource();
    try (Connection c = pool.getConnection(); Statement s = c.createStatement()) {
      s.execute(schema());
    }
    IdempotencyFilter filter =
        IdempotencyFilter.builder()
            .dataSource(pool)
            .scope(
                r -> {
                  String h = r.getHeader("Authorization");
                  String token = h != null && h.regionMatches(true, 0, "Bearer ", 0, 7) ? h.substring(7).strip() : "";
                  String account = TOKENS.get(token);
                  if (account == null) {
                    throw new IdempotencyFilter.Refused(
                        401, "unauthorized", "a valid \"Authorization: Bearer <token>\" is required");
                  }
                  return account;
                })
            .build();

    Tomcat tomcat = new Tomcat();
    String base = Files.createTempDirectory("http-java").toString();
    tomcat.setBaseDir(base);
    tomcat.setPort(Integer.parseInt(env("PORT", "3002")));
    tomcat.getConnector().setProperty("address", "127.0.0.1");
    Context ctx = tomcat.addContext("", base);
    Tomcat.addServlet(ctx, "orders", new Orders()).addMapping("/orders");
    Tomcat.addServlet(ctx, "health", new Health()).addMapping("/healthz");
    FilterDef def = new FilterDef();
    def.setFilterName("idempotency");
    def.setFilter(filter);
    ctx.addFilterDef(def);
    FilterMap map = new FilterMap();
    map.setFilterName("idempotency");
    map.addURLPattern("/orders");
    ctx.addFilterMap(map);
    // stopped (SIGTERM, Ctrl-C): Tomcat's work directory goes with it
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  try {
                    tomcat.stop();
                    tomcat.destroy();
                  } catch (Exception e) {
                    Logger.getLogger("http-java").log(Level.WARNING, "Tomcat did not stop", e);
                  }
                  try (var paths = Files.walk(java.nio.file.Path.of(base))) {
                    for (var f : paths.sorted(java.util.Comparator.reverseOrder()).toList()) {
                      Files.delete(f);
                    }
                  } catch (IOException e) {
                    Logger.getLogger("http-java").log(Level.WARNING, "could not remove " + base, e);
                  }
                }));
    tomcat.start();
    System.out.println("listening on http://127.0.0.1:" + tomcat.getConnector().getLocalPort());
    tomcat.getServer().await();
  }
}
