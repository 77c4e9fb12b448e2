#!/usr/bin/env bash
# Java client tests: bash java/run.sh jdbc|hibernate. Compiles src/ into target/clients/java with
# javac against Debian's jars (libpostgresql-jdbc-java 42.5, libhibernate3-java 3.6) and runs the
# main class, which prints each check and exits non-zero if any failed.
# Needs PGHOST PGPORT PGUSER PGDATABASE (the server's TCP port on 127.0.0.1: pgjdbc has no unix
# sockets of its own) and SERVER_LOG (the server's log, written with log_statement = 'all').
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="$HERE/../../../target/clients/java"
J=/usr/share/java
CP="$J/postgresql.jar"
for jar in hibernate-core hibernate-commons-annotations geronimo-jpa_2.0_spec geronimo-jta-1.2-spec \
    dom4j commons-collections3 antlr slf4j-api slf4j-nop cglib asm; do
    CP="$CP:$J/$jar.jar"
done
for jar in ${CP//:/ }; do [ -f "$jar" ] || { echo "missing $jar (apt-get install libpostgresql-jdbc-java libhibernate3-java)"; exit 1; }; done
mkdir -p "$OUT"
javac -nowarn -encoding UTF-8 -cp "$CP" -d "$OUT" "$HERE"/src/*.java
case "${1:-}" in
    jdbc) main=JdbcTest ;;
    hibernate) main=HibernateTest ;;
    *) echo "usage: $0 jdbc|hibernate"; exit 2 ;;
esac
# Hibernate 3.6's default bytecode provider is javassist, which Debian only recommends (not
# installed here); cglib is (libcglib-java, with asm), and on Java 17 it needs java.lang opened.
exec java -Dhibernate.bytecode.provider=cglib --add-opens java.base/java.lang=ALL-UNNAMED -cp "$OUT:$CP" "$main"
