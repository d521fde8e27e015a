package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.Statement;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

class VersionsTest {
  /** The edition the suite runs against: IDEM_EDITION=managed in the managed suite. */
  static String testEdition() {
    return TestDb.env("IDEM_EDITION", Versions.EXTENSION);
  }

  @Test
  void theTestDatabaseIsDetectedOnceAndCached() throws Exception {
    DataSource ds = TestDb.db();
    Versions.Edition e = Versions.edition(ds);
    assertEquals(testEdition(), e.name());
    assertEquals("0.4.0", e.version());
    assertEquals(Versions.INSTALLED_AS_EXTENSION, e.installedAs());
    assertTrue(e.offers("reserve") && e.offers("claim_once"));
    assertFalse(e.offers("no_such_function"));
    assertEquals(Versions.EXTENSION.equals(e.name()), e.offers("reserve_begin"));
    assertSame(e, Versions.edition(ds));
    assertSame(e, new IdempotencyClient(ds).edition());
    try (Connection c = ds.getConnection()) {
      Versions.Edition once = Versions.edition(c);
      assertEquals(e, once);
      assertSame(once, Versions.edition(c));
    }
  }

  @Test
  void aDatabaseWithoutEitherAndOneWithThePlainScript() throws Exception {
    String script = Files.readString(Path.of("../../editions/managed/idempotency--0.4.0.sql"));
    for (String name : new String[] {"none", "script"}) {
      String db = TestDb.DB + "_edition_" + name;
      try (Connection c = TestDb.dataSource("postgres").getConnection();
          Statement s = c.createStatement()) {
        s.execute("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)");
        s.execute("CREATE DATABASE " + db);
      }
      try (Connection c = TestDb.dataSource(db).getConnection()) {
        if (name.equals("script")) {
          try (Statement s = c.createStatement()) {
            s.execute(script);
          }
        }
        Versions.Edition e = Versions.detect(c);
        if (name.equals("none")) {
          assertNull(e.name());
          assertNull(e.version());
          assertNull(e.installedAs());
          assertTrue(e.functions().isEmpty());
        } else {
          assertEquals(Versions.MANAGED, e.name());
          assertEquals("0.4.0", e.version());
          assertEquals(Versions.INSTALLED_AS_SCRIPT, e.installedAs());
          assertTrue(e.offers("reserve"));
          assertFalse(e.offers("reserve_begin"));
        }
      } finally {
        try (Connection c = TestDb.dataSource("postgres").getConnection();
            Statement s = c.createStatement()) {
          s.execute("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)");
        }
      }
    }
  }
}
