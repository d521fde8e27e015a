package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/** The client's statement texts against test/vectors/statements.json, the shared list. */
class StatementsTest {
  static final Path LIST = Path.of("../../test/vectors/statements.json");

  static String folded(String s) {
    return s.strip().replaceAll("\\s+", " ");
  }

  @Test
  @SuppressWarnings("unchecked")
  void everyTextIsTheListedOne() throws Exception {
    Map<String, Object> file = (Map<String, Object>) Json.parse(Files.readAllBytes(LIST));
    Map<String, Object> listed = (Map<String, Object>) file.get("statements");
    assertTrue(Statements.LISTED.size() >= 14, "statements checked: " + Statements.LISTED.size());
    for (Map.Entry<String, String> e : Statements.LISTED.entrySet()) {
      Map<String, Object> entry = (Map<String, Object>) listed.get(e.getKey());
      assertTrue(entry != null, e.getKey() + ": not in " + LIST);
      // the list's $1, $2, ... written as JDBC's ?
      String want = folded((String) entry.get("sql")).replaceAll("\\$[0-9]+", "?");
      assertEquals(want, folded(e.getValue()), e.getKey());
      long marks = e.getValue().chars().filter(ch -> ch == '?').count();
      assertEquals(((List<Object>) entry.get("params")).size(), marks, e.getKey() + ": parameters");
    }
  }

  /** No statement text outside Statements.java: no string literal starts like one. */
  @Test
  void noTextOutsideStatements() throws Exception {
    Pattern statement =
        Pattern.compile(
            "\"\\s*(SELECT|INSERT|UPDATE|DELETE|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|SET|SHOW)\\b");
    List<String> found = new ArrayList<>();
    try (Stream<Path> files = Files.walk(Path.of("src/main/java"))) {
      for (Path f : files.filter(p -> p.toString().endsWith(".java")).toList()) {
        String name = f.getFileName().toString();
        if (name.equals("Statements.java") || name.equals("SpecStatements.java")) continue;
        List<String> lines = Files.readAllLines(f);
        for (int i = 0; i < lines.size(); i++) {
          String code = lines.get(i).split("//", 2)[0];
          if (statement.matcher(code).find()) found.add(f + ":" + (i + 1) + ": " + code.strip());
        }
      }
    }
    assertEquals(List.of(), found);
  }
}
