package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The Idempotency-Key header against test/vectors/idempotency_key.json, as every client. */
class KeyHeaderTest {
  @Test
  void vectors() throws Exception {
    byte[] text = Files.readAllBytes(Path.of("../../test/vectors/idempotency_key.json"));
    List<Object> keys = AnswersTest.list(AnswersTest.map(Json.parse(text)).get("keys"));
    assertTrue(keys.size() >= 10, "vectors: " + keys.size());
    for (Object o : keys) {
      Map<String, Object> c = AnswersTest.map(o);
      String name = (String) c.get("name");
      String header = c.get("header") instanceof String h ? h : null;
      if (c.containsKey("error")) {
        IdempotencyFilter.KeyHeaderException e =
            assertThrows(
                IdempotencyFilter.KeyHeaderException.class,
                () -> IdempotencyFilter.parseKey(header),
                name);
        assertEquals(c.get("error"), e.code, name);
      } else {
        assertEquals(c.get("key"), IdempotencyFilter.parseKey(header), name);
      }
    }
  }
}
