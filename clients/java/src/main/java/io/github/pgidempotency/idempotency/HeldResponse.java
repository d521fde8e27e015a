package io.github.pgidempotency.idempotency;

import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Holds the handler's status and body until the transaction has committed; its headers go
 * to the real response (nothing is sent before the body) and are reset on an error answer.
 */
final class HeldResponse extends HttpServletResponseWrapper {
  private final ByteArrayOutputStream body = new ByteArrayOutputStream();
  private int status = 0;
  private PrintWriter writer;
  private ServletOutputStream stream;

  HeldResponse(HttpServletResponse r) {
    super(r);
  }

  int status() {
    return status == 0 ? 200 : status;
  }

  @Override
  public void setStatus(int sc) {
    status = sc;
  }

  @Override
  public int getStatus() {
    return status();
  }

  @Override
  public void sendError(int sc, String msg) {
    status = sc;
    if (msg != null) body.writeBytes(msg.getBytes(StandardCharsets.UTF_8));
  }

  @Override
  public void sendError(int sc) {
    status = sc;
  }

  @Override
  public void sendRedirect(String location) {
    status = 302;
    setHeader("Location", location);
  }

  @Override
  public ServletOutputStream getOutputStream() {
    if (stream == null) {
      stream =
          new ServletOutputStream() {
            @Override
            public void write(int b) {
              body.write(b);
            }

            @Override
            public void write(byte[] b, int off, int len) {
              body.write(b, off, len);
            }

            @Override
            public boolean isReady() {
              return true;
            }

            @Override
            public void setWriteListener(WriteListener l) {
              throw new IllegalStateException("the answer is held until the commit");
            }
          };
    }
    return stream;
  }

  @Override
  public PrintWriter getWriter() {
    if (writer == null) {
      String enc = getCharacterEncoding();
      Charset cs = enc == null ? StandardCharsets.UTF_8 : Charset.forName(enc);
      writer = new PrintWriter(new OutputStreamWriter(getOutputStream(), cs));
    }
    return writer;
  }

  @Override
  public void flushBuffer() {
    if (writer != null) writer.flush();
  }

  @Override
  public void setContentLength(int len) {}

  @Override
  public void setContentLengthLong(long len) {}

  @Override
  public boolean isCommitted() {
    return false;
  }

  @Override
  public void resetBuffer() {
    body.reset();
  }

  @Override
  public void reset() {
    super.reset();
    body.reset();
    status = 0;
  }

  private byte[] bytes() {
    if (writer != null) writer.flush();
    return body.toByteArray();
  }

  /** The answer as it is stored ({@link #storedAnswer}), with the headers the client gets. */
  String stored(List<String> keep) {
    HttpServletResponse res = (HttpServletResponse) getResponse();
    Map<String, String> headers = new LinkedHashMap<>();
    if (res.getContentType() != null) headers.put("content-type", res.getContentType());
    for (String name : res.getHeaderNames()) {
      if (!headers.containsKey(name.toLowerCase(Locale.ROOT))) {
        headers.put(name, String.join(", ", res.getHeaders(name)));
      }
    }
    return Answers.storedAnswer(bytes(), headers, keep);
  }

  /** Sends the held answer on the real response. */
  void release(boolean flush) throws IOException {
    byte[] b = bytes();
    HttpServletResponse res = (HttpServletResponse) getResponse();
    res.setStatus(status());
    if (!flush && res.getBufferSize() < b.length + 1) {
      // kept in the container's buffer until the application's transaction has ended
      res.setBufferSize(b.length + 1);
    }
    res.setContentLength(b.length);
    res.getOutputStream().write(b);
    if (flush) res.flushBuffer();
  }
}
