package io.github.pgidempotency.idempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * The client's public API is the one its users were given: moving code between classes (or
 * adding a package-private one) must not change it. A change of this list is a change of the
 * public API, made on purpose.
 */
class ApiTest {
  /** Every public class of the client's classes (nested ones too) and their public members. */
  static List<String> publicApi() throws Exception {
    Path classes = Path.of(Idempotency.class.getProtectionDomain().getCodeSource().getLocation().toURI());
    List<String> api = new ArrayList<>();
    try (Stream<Path> files = Files.walk(classes)) {
      for (Path f : files.filter(p -> p.toString().endsWith(".class")).toList()) {
        String name = classes.relativize(f).toString().replace('/', '.').replaceAll("\\.class$", "");
        Class<?> c = Class.forName(name, false, ApiTest.class.getClassLoader());
        if (c.isAnonymousClass() || c.isSynthetic() || !visible(c)) continue;
        describe(c, api);
      }
    }
    api.sort(null);
    return api;
  }

  static boolean visible(Class<?> c) {
    for (Class<?> k = c; k != null; k = k.getDeclaringClass()) {
      if (!Modifier.isPublic(k.getModifiers())) return false;
    }
    return true;
  }

  static String types(Class<?>[] ts) {
    return Arrays.stream(ts).map(Class::getTypeName).collect(Collectors.joining(", "));
  }

  static void describe(Class<?> c, List<String> api) {
    String n = c.getTypeName();
    String kind =
        c.isRecord() ? "record" : c.isInterface() ? "interface" : c.isEnum() ? "enum" : "class";
    String sup =
        c.getSuperclass() == null || c.getSuperclass() == Object.class || c.isRecord()
            ? ""
            : " extends " + c.getSuperclass().getTypeName();
    String ifs = c.getInterfaces().length == 0 ? "" : " implements " + types(c.getInterfaces());
    api.add(Modifier.toString(c.getModifiers() & ~Modifier.INTERFACE & ~Modifier.ABSTRACT)
        + " " + kind + " " + n + sup + ifs);
    for (Constructor<?> k : c.getDeclaredConstructors()) {
      if (Modifier.isPublic(k.getModifiers())) api.add(n + "(" + types(k.getParameterTypes()) + ")");
    }
    // the methods a caller can call on it: its own and those it inherits from the client's
    // classes (a method moved to a superclass is the same API)
    for (Method m : c.getMethods()) {
      if (!m.getDeclaringClass().getPackageName().equals(Idempotency.class.getPackageName()) || m.isSynthetic()
          || m.isBridge()) {
        continue;
      }
      api.add(n + (Modifier.isStatic(m.getModifiers()) ? " static " : " ")
          + m.getReturnType().getTypeName() + " " + m.getName()
          + "(" + types(m.getParameterTypes()) + ")");
    }
    for (Field f : c.getDeclaredFields()) {
      if (!Modifier.isPublic(f.getModifiers()) || f.isSynthetic()) continue;
      api.add(n + (Modifier.isStatic(f.getModifiers()) ? " static " : " ")
          + f.getType().getTypeName() + " " + f.getName());
    }
  }

  @Test
  void thePublicApiIsTheListedOne() throws Exception {
    assertEquals(String.join("\n", Files.readAllLines(Path.of("src/test/public-api.txt"))),
        String.join("\n", publicApi()));
  }

  /** Prints the list (to write src/test/public-api.txt after a change made on purpose). */
  public static void main(String[] args) throws Exception {
    publicApi().forEach(System.out::println);
  }
}
