package sample;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.github.pgidempotency.idempotency.IdempotencyClient;
import io.github.pgidempotency.idempotency.IdempotencyException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.concurrent.Executors;
import javax.sql.DataSource;

/**
 * The packaging suite's Java sample: a user's service on the client the release built, from a
 * Maven repository. POST /orders with an Idempotency-Key makes one order per key.
 */
public final class OrdersService {
  private OrdersService() {}

  public static HttpServer start(DataSource ds) throws Exception {
    try (var c = ds.getConnection(); var st = c.createStatement()) {
      st.execute("CREATE TABLE IF NOT EXISTS java_sample_orders (id bigserial PRIMARY KEY, key text NOT NULL)");
    }
    IdempotencyClient client = new IdempotencyClient(ds);
    HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.setExecutor(Executors.newFixedThreadPool(8));
    server.createContext("/orders", ex -> order(client, ex));
    server.start();
    return server;
  }

  private static void order(IdempotencyClient client, HttpExchange ex) throws IOException {
    String key = ex.getRequestHeaders().getFirst("Idempotency-Key");
    String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
    int status;
    String answer;
    try {
      IdempotencyClient.Result r =
          client.runOnce(
              IdempotencyClient.Request.of("java-sample", key, body),
              (tx, reservation) -> {
                try (PreparedStatement ps =
                    tx.prepareStatement("INSERT INTO java_sample_orders (key) VALUES (?) RETURNING id")) {
                  ps.setString(1, key);
                  try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    return new IdempotencyClient.Answer(201, "{\"id\": " + rs.getLong(1) + "}");
                  }
                }
              });
      status = r.statusCode();
      answer = r.response();
    } catch (IdempotencyException e) {
      status = e.httpStatus() == 0 ? 500 : e.httpStatus();
      answer = "{\"error\": \"" + e.sqlState() + "\"}";
    }
    byte[] out = answer.getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("Content-Type", "application/json");
    ex.sendResponseHeaders(status, out.length);
    ex.getResponseBody().write(out);
    ex.close();
  }
}
