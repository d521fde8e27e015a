#!/usr/bin/env bash
# Builds the Java client offline with javac against the jars of Debian's packages under
# /usr/share/java (nothing is downloaded), and with "test" runs its JUnit 5 tests with the
# console launcher against the cluster of the PG* environment.
#   bash clients/java/build.sh            -> build/java/idempotency-client.jar
#   bash clients/java/build.sh test       (apt: openjdk-17-jdk-headless libpostgresql-jdbc-java
#                                          libtomcat10-java junit5)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${IDEM_JAVA_BUILD:-$root/build/java}
jars=/usr/share/java
# the servlet API and pgjdbc to compile the client; Tomcat's embedded server and JUnit 5 for
# the tests
main_cp=$jars/postgresql.jar:$jars/tomcat10-servlet-api.jar
tomcat_cp=
for j in api servlet-api catalina coyote util util-scan juli jaspic-api annotations-api el-api jni; do
  tomcat_cp+=$jars/tomcat10-$j.jar:
done
test_cp=$main_cp:${tomcat_cp}$jars/junit-jupiter-api.jar:$jars/apiguardian-api.jar:$jars/opentest4j.jar:$jars/junit-platform-commons.jar

rm -rf "$out/classes" "$out/test-classes"
mkdir -p "$out/classes" "$out/test-classes"
find "$here/src/main/java" -name '*.java' -print0 |
  xargs -0 javac --release 17 -Xlint:all -Werror -encoding UTF-8 -d "$out/classes" -cp "$main_cp"
jar --create --file "$out/idempotency-client.jar" -C "$out/classes" .
echo "built $out/idempotency-client.jar"
[[ ${1:-} == test ]] || exit 0

find "$here/src/test/java" -name '*.java' -print0 |
  xargs -0 javac --release 17 -Xlint:all,-serial -Werror -encoding UTF-8 -d "$out/test-classes" \
    -cp "$out/classes:$test_cp"
cd "$here"
# for DocsTest (it compiles the docs' blocks) and ExampleTest (it runs examples/http-java)
export IDEM_JAVA_CLASSPATH=$out/classes:$test_cp
# The standalone launcher brings the Jupiter engine; the tests' class path is given explicitly.
exec java -jar "$jars/junit-platform-console-standalone.jar" --disable-banner --disable-ansi-colors \
  --details=tree --details-theme=ascii --fail-if-no-tests \
  --class-path "$out/test-classes:$out/classes:$test_cp" --select-package io.github.pgidempotency.idempotency
