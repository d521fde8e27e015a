package io.github.pgidempotency.idempotency;

import jakarta.servlet.Filter;
import jakarta.servlet.http.HttpServlet;
import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import org.apache.catalina.Context;
import org.apache.catalina.LifecycleException;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.util.descriptor.web.FilterDef;
import org.apache.tomcat.util.descriptor.web.FilterMap;

/** An embedded Tomcat (Debian's libtomcat10-java) on a free port with filters and a servlet. */
final class Server implements AutoCloseable {
  // Tomcat's start and stop notes (and a warning about a class Debian's jars leave out, for a
  // JDBC driver clean-up this embedded use does not need) are not test output.
  private static final java.util.logging.Logger TOMCAT_LOG = quiet();

  private static java.util.logging.Logger quiet() {
    java.util.logging.Logger l = java.util.logging.Logger.getLogger("org.apache");
    l.setLevel(java.util.logging.Level.SEVERE);
    return l;
  }

  private final Tomcat tomcat = new Tomcat();
  private File base;
  private final HttpClient http = HttpClient.newHttpClient();

  HttpClient http() {
    return http;
  }
  final int port;

  Server(HttpServlet servlet, Filter... filters) throws IOException, LifecycleException {
    base = Files.createTempDirectory("idem-java-tomcat").toFile();
    tomcat.setBaseDir(base.getAbsolutePath());
    tomcat.setPort(0);
    tomcat.getConnector().setProperty("address", "127.0.0.1");
    Context ctx = tomcat.addContext("", base.getAbsolutePath());
    Tomcat.addServlet(ctx, "app", servlet).addMapping("/*");
    int i = 0;
    for (Filter f : filters) {
      FilterDef def = new FilterDef();
      def.setFilterName("f" + i);
      def.setFilter(f);
      ctx.addFilterDef(def);
      FilterMap map = new FilterMap();
      map.setFilterName("f" + i);
      map.addURLPattern("/*");
      ctx.addFilterMap(map);
      i++;
    }
    tomcat.start();
    port = tomcat.getConnector().getLocalPort();
  }

  HttpResponse<String> post(String path, String key, String contentType, String body)
      throws IOException, InterruptedException {
    HttpRequest.Builder b =
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
            .header("Content-Type", contentType)
            .header("X-Account", "acct-1")
            .POST(HttpRequest.BodyPublishers.ofString(body));
    if (key != null) b.header("Idempotency-Key", key);
    return http.send(b.build(), HttpResponse.BodyHandlers.ofString());
  }

  HttpResponse<String> post(String path, String key, String body)
      throws IOException, InterruptedException {
    return post(path, key, "application/json", body);
  }

  @Override
  public void close() throws LifecycleException {
    try {
      tomcat.stop();
      tomcat.destroy();
    } finally {
      // Tomcat keeps the first one's directory as catalina.home for the JVM, and every later
      // one would make it again
      for (String property : new String[] {"catalina.home", "catalina.base"}) {
        if (base.getAbsolutePath().equals(System.getProperty(property))) {
          System.clearProperty(property);
        }
      }
      try {
        TestDb.removeTree(base.toPath()); // Tomcat's work directory
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    }
  }
}
