package sample;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import io.github.pgidempotency.idempotency.UnixSocketFactory;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;

/** A burst of one key against the sample service makes one order (PG* names the server). */
class OrdersServiceTest {
  @Test
  void aBurstOfOneKeyMakesOneOrder() throws Exception {
    String host = System.getenv("PGHOST");
    int port = Integer.parseInt(System.getenv("PGPORT"));
    PGSimpleDataSource ds = new PGSimpleDataSource();
    ds.setUser(System.getenv("PGUSER"));
    ds.setDatabaseName(System.getenv("PGDATABASE"));
    ds.setServerNames(new String[] {"localhost"});
    ds.setPortNumbers(new int[] {port});
    ds.setSocketFactory(UnixSocketFactory.class.getName());
    ds.setSocketFactoryArg(host + "/.s.PGSQL." + port);
    HttpServer server = OrdersService.start(ds);
    try {
      String key = "java-sample-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
      HttpClient http = HttpClient.newHttpClient();
      URI uri = URI.create("http://127.0.0.1:" + server.getAddress().getPort() + "/orders");
      List<CompletableFuture<HttpResponse<String>>> burst = new ArrayList<>();
      for (int i = 0; i < 8; i++) {
        burst.add(
            http.sendAsync(
                HttpRequest.newBuilder(uri)
                    .header("Idempotency-Key", key)
                    .header("Content-Type", "application/json")
                    .POST(HttpRequest.BodyPublishers.ofString("{\"item\": \"widget\"}"))
                    .build(),
                HttpResponse.BodyHandlers.ofString()));
      }
      List<Integer> statuses = new ArrayList<>();
      for (var f : burst) statuses.add(f.get().statusCode());
      for (int s : statuses) assertTrue(s == 201 || s == 409, "answers " + statuses);
      try (var c = ds.getConnection();
          PreparedStatement ps =
              c.prepareStatement("SELECT count(*) FROM java_sample_orders WHERE key = ?")) {
        ps.setString(1, key);
        try (ResultSet rs = ps.executeQuery()) {
          rs.next();
          assertEquals(1, rs.getLong(1), "orders of the burst's key (answers " + statuses + ")");
        }
      }
      System.out.println("java-sample: a burst of 8 requests with one key made 1 order (answers " + statuses + ")");
    } finally {
      server.stop(0);
    }
  }
}
