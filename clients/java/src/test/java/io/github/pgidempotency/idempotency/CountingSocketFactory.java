package io.github.pgidempotency.idempotency;

import java.io.ByteArrayOutputStream;
import java.io.FilterOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import javax.net.SocketFactory;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * A pgjdbc socket factory (over the Unix socket, as {@link UnixSocketFactory}) that reads what the client writes
 * (the frontend messages of PostgreSQL's protocol) and records its round trips: each Sync (or
 * simple Query) ends one, and a round trip is recorded as the texts of the statements it runs
 * (the Parse of each Bind, named or not), joined by "; ". What pgjdbc sends while it connects
 * is not recorded: {@link #dataSource} clears the record once the connection is made.
 */
public final class CountingSocketFactory extends SocketFactory {
  private static final List<String> TRIPS = new ArrayList<>();
  private final Path path;

  public CountingSocketFactory(String path) {
    this.path = Path.of(path);
  }

  /** The round trips recorded since the last connection was made. */
  static synchronized List<String> trips() {
    return List.copyOf(TRIPS);
  }

  static synchronized void clear() {
    TRIPS.clear();
  }

  private static synchronized void record(String trip) {
    TRIPS.add(trip);
  }

  /** The test database through this factory (over its Unix socket only). */
  static PGSimpleDataSource dataSource() {
    PGSimpleDataSource plain = TestDb.dataSource(TestDb.DB);
    PGSimpleDataSource ds =
        new PGSimpleDataSource() {
          private static final long serialVersionUID = 1L;

          @Override
          public Connection getConnection() throws SQLException {
            Connection c = super.getConnection();
            clear();
            return c;
          }
        };
    ds.setUser(plain.getUser());
    ds.setDatabaseName(plain.getDatabaseName());
    ds.setPortNumbers(plain.getPortNumbers());
    ds.setServerNames(plain.getServerNames());
    if (plain.getSocketFactoryArg() == null) {
      throw new IllegalStateException("round trips are counted over the Unix socket (PGHOST)");
    }
    ds.setSocketFactory(CountingSocketFactory.class.getName());
    ds.setSocketFactoryArg(plain.getSocketFactoryArg());
    return ds;
  }

  @Override
  public Socket createSocket() {
    return UnixSocketFactory.createSocket(path, Recorder::new);
  }

  /** A connected socket: the host and port pgjdbc gives are those of the URL, unused here. */
  private Socket connected() throws IOException {
    Socket s = createSocket();
    s.connect(null);
    return s;
  }

  // the overloads SocketFactory asks for: all the same socket
  @Override public Socket createSocket(String h, int p) throws IOException { return connected(); }
  @Override public Socket createSocket(String h, int p, InetAddress l, int lp) throws IOException { return connected(); }
  @Override public Socket createSocket(InetAddress h, int p) throws IOException { return connected(); }
  @Override public Socket createSocket(InetAddress h, int p, InetAddress l, int lp) throws IOException { return connected(); }

  /** Reads the frontend messages written to it and records the round trips they make. */
  static final class Recorder extends FilterOutputStream {
    private final ByteArrayOutputStream pending = new ByteArrayOutputStream();
    private final Map<String, String> prepared = new HashMap<>();
    private final List<String> trip = new ArrayList<>();
    private boolean started; // the startup message (which has no type byte) is behind

    Recorder(OutputStream out) {
      super(out);
    }

    @Override
    public void write(int b) throws IOException {
      out.write(b);
      pending.write(b);
      parse();
    }

    @Override
    public void write(byte[] b, int off, int len) throws IOException {
      out.write(b, off, len);
      pending.write(b, off, len);
      parse();
    }

    private static int int32(byte[] b, int at) {
      return ((b[at] & 0xff) << 24) | ((b[at + 1] & 0xff) << 16) | ((b[at + 2] & 0xff) << 8)
          | (b[at + 3] & 0xff);
    }

    /** The NUL-terminated string at b[at], and where the next starts. */
    private static String cstring(byte[] b, int at, int[] next) {
      int end = at;
      while (b[end] != 0) end++;
      next[0] = end + 1;
      return new String(b, at, end - at, StandardCharsets.UTF_8);
    }

    private void parse() {
      byte[] b = pending.toByteArray();
      int at = 0;
      while (true) {
        if (!started) {
          // SSLRequest / GSSENCRequest / the startup message: length, then a code or version
          if (b.length - at < 8 || b.length - at < int32(b, at)) break;
          int code = int32(b, at + 4);
          at += int32(b, at);
          if (code == 196608) started = true; // protocol 3.0: the startup message
          continue;
        }
        if (b.length - at < 5 || b.length - at < 1 + int32(b, at + 1)) break;
        char type = (char) b[at];
        int body = at + 5;
        int[] next = new int[1];
        switch (type) {
          case 'P' -> { // Parse: statement name, query text
            String name = cstring(b, body, next);
            prepared.put(name, cstring(b, next[0], next).strip()); // pgjdbc keeps the space after ';'
          }
          case 'B' -> { // Bind: portal name, statement name
            cstring(b, body, next);
            trip.add(prepared.getOrDefault(cstring(b, next[0], next), "?"));
          }
          case 'Q' -> record(cstring(b, body, next)); // a simple query: a round trip of its own
          case 'S' -> { // Sync: the end of a round trip
            record(String.join("; ", trip));
            trip.clear();
          }
          default -> {}
        }
        at += 1 + int32(b, at + 1);
      }
      pending.reset();
      pending.write(b, at, b.length - at);
    }
  }
}
