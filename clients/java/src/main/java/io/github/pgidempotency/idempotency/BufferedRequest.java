package io.github.pgidempotency.idempotency;

import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.InputStreamReader;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;

/** The request with its body read once, served again from memory. */
final class BufferedRequest extends HttpServletRequestWrapper {
  private final byte[] body;

  BufferedRequest(HttpServletRequest r, byte[] body) {
    super(r);
    this.body = body;
  }

  @Override
  public ServletInputStream getInputStream() {
    ByteArrayInputStream in = new ByteArrayInputStream(body);
    return new ServletInputStream() {
      @Override
      public int read() {
        return in.read();
      }

      @Override
      public int read(byte[] b, int off, int len) {
        return in.read(b, off, len);
      }

      @Override
      public boolean isFinished() {
        return in.available() == 0;
      }

      @Override
      public boolean isReady() {
        return true;
      }

      @Override
      public void setReadListener(ReadListener l) {
        throw new IllegalStateException("the body is already read");
      }
    };
  }

  @Override
  public BufferedReader getReader() {
    String enc = getCharacterEncoding();
    Charset cs = enc == null ? StandardCharsets.UTF_8 : Charset.forName(enc);
    return new BufferedReader(new InputStreamReader(getInputStream(), cs));
  }
}
