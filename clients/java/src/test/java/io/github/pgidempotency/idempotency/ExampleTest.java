package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.UUID;
import org.junit.jupiter.api.Test;

/** examples/http-java runs as docs/clients-java.md says: the same request twice, one order. */
class ExampleTest {
  static final String DB = "javaexample";

  @Test
  void theSameRequestTwiceMakesOneOrder() throws Exception {
    TestDb.db(); // the cluster is reachable
    try (Connection c = TestDb.dataSource("postgres").getConnection();
        Statement s = c.createStatement()) {
      s.execute("DROP DATABASE IF EXISTS " + DB + " WITH (FORCE)");
      s.execute("CREATE DATABASE " + DB);
    }
    String classPath = TestDb.classPath();
    assertNotNull(classPath, "the class path (IDEM_JAVA_CLASSPATH, or Maven's java.class.path)");
    Path source = Path.of(TestDb.env("IDEM_JAVA_EXAMPLE", "../../examples/http-java/OrdersService.java"));
    ProcessBuilder pb =
        new ProcessBuilder("java", "-cp", classPath, source.toString()).redirectErrorStream(true);
    pb.environment().put("PGDATABASE", DB);
    pb.environment().put("PORT", "0");
    Process p = pb.start();
    try {
      BufferedReader out =
          new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
      String line, url = null;
      StringBuilder seen = new StringBuilder();
      while (url == null && (line = out.readLine()) != null) { // until the service listens
        seen.append(line).append('\n');
        if (line.startsWith("listening on ")) url = line.substring("listening on ".length());
      }
      assertNotNull(url, "the example did not start:\n" + seen);
      Thread drain = new Thread(() -> out.lines().forEach(l -> {}));
      drain.setDaemon(true);
      drain.start();

      HttpClient http = HttpClient.newHttpClient();
      String key = UUID.randomUUID().toString();
      HttpRequest order =
          HttpRequest.newBuilder(URI.create(url + "/orders"))
              .header("Authorization", "Bearer alice-token")
              .header("Idempotency-Key", key)
              .header("Content-Type", "application/json")
              .POST(HttpRequest.BodyPublishers.ofString("{\"item\": \"widget\", \"quantity\": 2}"))
              .build();
      HttpResponse<String> first = http.send(order, HttpResponse.BodyHandlers.ofString());
      assertEquals(201, first.statusCode(), first.body());
      assertTrue(first.body().contains("\"total_cents\": 500"), first.body());
      HttpResponse<String> second = http.send(order, HttpResponse.BodyHandlers.ofString());
      assertEquals(201, second.statusCode());
      assertEquals("true", second.headers().firstValue("Idempotent-Replayed").orElse(""));
      assertEquals(Json.compact(first.body()), second.body()); // the stored answer, compact
      HttpResponse<String> bad =
          http.send(
              HttpRequest.newBuilder(URI.create(url + "/orders"))
                  .header("Authorization", "Bearer alice-token")
                  .header("Idempotency-Key", UUID.randomUUID().toString())
                  .header("Content-Type", "application/json")
                  .POST(HttpRequest.BodyPublishers.ofString("{\"item\": \"nothing\", \"quantity\": 2}"))
                  .build(),
              HttpResponse.BodyHandlers.ofString());
      assertEquals(400, bad.statusCode());
      HttpResponse<String> anonymous =
          http.send(
              HttpRequest.newBuilder(URI.create(url + "/orders"))
                  .header("Idempotency-Key", key)
                  .POST(HttpRequest.BodyPublishers.ofString("{}"))
                  .build(),
              HttpResponse.BodyHandlers.ofString());
      assertEquals(401, anonymous.statusCode());

      try (Connection c = TestDb.dataSource(DB).getConnection();
          Statement s = c.createStatement();
          ResultSet rs = s.executeQuery("SELECT count(*) FROM orders")) {
        rs.next();
        assertEquals(1, rs.getLong(1));
      }
    } finally {
      p.destroy();
      p.waitFor();
    }
  }
}
