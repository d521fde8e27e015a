package io.github.pgidempotency.idempotency;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.net.SocketAddress;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.util.function.UnaryOperator;
import javax.net.SocketFactory;

/**
 * A pgjdbc socket factory that connects to PostgreSQL's Unix-domain socket with Java 16+'s own
 * Unix-domain channels (no native library): {@code
 * jdbc:postgresql://localhost/db?socketFactory=io.github.pgidempotency.idempotency.UnixSocketFactory&socketFactoryArg=/run/postgresql/.s.PGSQL.5432}.
 * The host and port of the URL are ignored; socketTimeout is not supported on such a socket.
 */
public final class UnixSocketFactory extends SocketFactory {
  private final Path path;

  /** path: the socket file ({@code <directory>/.s.PGSQL.<port>}). */
  public UnixSocketFactory(String path) {
    this.path = Path.of(path);
  }

  @Override
  public Socket createSocket() {
    return new UnixSocket(path, UnaryOperator.identity());
  }

  /** An unconnected socket to path whose output stream is wrap(the channel's). */
  static Socket createSocket(Path path, UnaryOperator<OutputStream> wrap) {
    return new UnixSocket(path, wrap);
  }

  @Override
  public Socket createSocket(String host, int port) throws IOException {
    Socket s = createSocket();
    s.connect(null);
    return s;
  }

  @Override
  public Socket createSocket(String host, int port, InetAddress localHost, int localPort)
      throws IOException {
    return createSocket(host, port);
  }

  @Override
  public Socket createSocket(InetAddress host, int port) throws IOException {
    return createSocket((String) null, port);
  }

  @Override
  public Socket createSocket(InetAddress a, int port, InetAddress localAddress, int localPort)
      throws IOException {
    return createSocket((String) null, port);
  }

  /** A Socket over a Unix-domain SocketChannel (blocking); TCP options are accepted, unused. */
  private static final class UnixSocket extends Socket {
    private final Path path;
    private final UnaryOperator<OutputStream> wrap;
    private SocketChannel channel;
    private InputStream in;
    private OutputStream out;

    UnixSocket(Path path, UnaryOperator<OutputStream> wrap) {
      this.path = path;
      this.wrap = wrap;
    }

    @Override
    public void connect(SocketAddress ignored) throws IOException {
      connect(ignored, 0);
    }

    @Override
    public synchronized void connect(SocketAddress ignored, int timeout) throws IOException {
      channel = SocketChannel.open(StandardProtocolFamily.UNIX);
      channel.connect(UnixDomainSocketAddress.of(path));
      in = Channels.newInputStream(channel);
      out = wrap.apply(Channels.newOutputStream(channel));
    }

    @Override
    public InputStream getInputStream() throws IOException {
      if (in == null) throw new IOException("not connected");
      return in;
    }

    @Override
    public OutputStream getOutputStream() throws IOException {
      if (out == null) throw new IOException("not connected");
      return out;
    }

    @Override
    public boolean isConnected() {
      return channel != null && channel.isConnected();
    }

    @Override
    public boolean isClosed() {
      return channel != null && !channel.isOpen();
    }

    @Override
    public synchronized void close() throws IOException {
      if (channel != null) channel.close();
    }

    @Override
    public void setTcpNoDelay(boolean on) {}

    @Override
    public void setKeepAlive(boolean on) {}

    @Override
    public synchronized void setSoTimeout(int timeout) {}

    @Override
    public synchronized int getSoTimeout() {
      return 0;
    }

    @Override
    public synchronized void setReceiveBufferSize(int size) {}

    @Override
    public synchronized void setSendBufferSize(int size) {}

    @Override
    public void shutdownInput() throws IOException {
      channel.shutdownInput();
    }

    @Override
    public void shutdownOutput() throws IOException {
      channel.shutdownOutput();
    }
  }
}
