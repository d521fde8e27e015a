package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/** The Java blocks of docs/clients-java.md not marked as fragments compile against the client. */
class DocsTest {
  record Block(int line, String code) {}

  static List<Block> blocks(Path page) throws IOException {
    List<String> lines = Files.readAllLines(page, StandardCharsets.UTF_8);
    List<Block> out = new ArrayList<>();
    for (int i = 0; i < lines.size(); i++) {
      if (!lines.get(i).equals("```java")) continue;
      boolean fragment = i > 0 && lines.get(i - 1).startsWith("<!-- fragment:");
      int end = i + 1;
      while (!lines.get(end).equals("```")) end++;
      if (!fragment) out.add(new Block(i + 1, String.join("\n", lines.subList(i + 1, end)) + "\n"));
      i = end;
    }
    return out;
  }

  @TestFactory
  Stream<DynamicTest> javaBlocksCompile() throws IOException {
    Path page = Path.of(TestDb.env("IDEM_JAVA_DOC", "../../docs/clients-java.md"));
    List<Block> blocks = blocks(page);
    assertTrue(blocks.size() >= 2, "the page has Java blocks");
    String classPath = TestDb.classPath();
    return blocks.stream()
        .map(
            b ->
                DynamicTest.dynamicTest(
                    "clients-java.md:" + b.line(),
                    () -> {
                      assertNotNull(classPath, "the class path (IDEM_JAVA_CLASSPATH, or Maven's java.class.path)");
                      Matcher m = Pattern.compile("public class (\\w+)").matcher(b.code());
                      assertTrue(m.find(), "a public class");
                      Path dir = Files.createTempDirectory("idem-java-doc");
                      try {
                        Path src = dir.resolve(m.group(1) + ".java");
                        Files.writeString(src, b.code());
                        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
                        ByteArrayOutputStream err = new ByteArrayOutputStream();
                        int rc =
                            javac.run(
                                null, err, err, "--release", "17", "-d", dir.toString(), "-cp",
                                classPath, src.toString());
                        assertEquals(0, rc, err.toString(StandardCharsets.UTF_8));
                      } finally {
                        TestDb.removeTree(dir);
                      }
                    }));
  }
}
