import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Shared by JdbcTest and HibernateTest: checks that print themselves, the connection, the log. */
final class Checks {
    private static int passed, failed;

    static void check(String what, boolean ok, Object detail) {
        if (ok) passed++; else failed++;
        System.out.println((ok ? "ok   " : "FAIL ") + what + (ok ? "" : "  [" + detail + "]"));
    }

    static void check(String what, boolean ok) { check(what, ok, "false"); }

    static void equal(String what, Object got, Object want) {
        check(what, want == null ? got == null : want.equals(got), "got " + got + ", want " + want);
    }

    /** Runs a named group of checks; an exception is one failed check, the others still run. */
    static void section(String name, ThrowingRunnable body) {
        System.out.println("-- " + name);
        try {
            body.run();
        } catch (Throwable t) {
            t.printStackTrace(System.out);
            check(name + ": no exception", false, t);
        }
    }

    interface ThrowingRunnable { void run() throws Exception; }

    static int finish() {
        System.out.println(passed + " checks passed, " + failed + " failed");
        return failed == 0 && passed > 0 ? 0 : 1;
    }

    /** pgjdbc 42.5 reads no PG* variables and has no unix sockets: TCP on 127.0.0.1, as run.sh's
     *  clusters listen there with trust authentication. */
    static String url() {
        return "jdbc:postgresql://127.0.0.1:" + env("PGPORT") + "/" + env("PGDATABASE")
                + "?user=" + env("PGUSER") + "&ApplicationName=" + Checks.class.getName();
    }

    static Connection connect() throws Exception { return DriverManager.getConnection(url()); }

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) throw new IllegalStateException(name + " is not set");
        return v;
    }

    /** The column lists of every INSERT into TABLE in the server log (log_statement = 'all'). An
     *  INSERT without a column list is returned as "*" (it would be positional, id included). */
    static List<String> insertColumnLists(String table) throws Exception {
        return columnListsIn(logText(), table);
    }

    static List<String> columnListsIn(String log, String table) {
        Pattern p = Pattern.compile("insert\\s+into\\s+(?:\\w+\\.)?\"?" + Pattern.quote(table)
                + "(?![\\w$])\"?\\s*(\\(([^)]*)\\))?", Pattern.CASE_INSENSITIVE);
        List<String> out = new ArrayList<>();
        Matcher m = p.matcher(log);
        while (m.find()) out.add(m.group(1) == null ? "*" : m.group(2));
        return out;
    }

    static String logText() throws Exception { return Files.readString(Path.of(env("SERVER_LOG"))); }

    /** The log check on a made-up log: it sees a column list, a positional INSERT, quoted names,
     *  and not a longer table name. */
    static void logCheckSelfTest() {
        String log = "LOG:  execute S_1: insert into hb_photos (note) values ($1)\n\tRETURNING *\n"
                + "LOG:  statement: INSERT INTO public.hb_photos VALUES (1, 'x')\n"
                + "LOG:  statement: INSERT INTO \"hb_photos\" (\"id\", \"note\") VALUES (DEFAULT, 'y')\n"
                + "LOG:  statement: INSERT INTO hb_photos_old (id) VALUES (1)\n";
        equal("the server-log check itself, on a made-up log", columnListsIn(log, "hb_photos"),
                List.of("note", "*", "\"id\", \"note\""));
    }

    /** Check 5: the client never sent an id of its own: no INSERT into TABLE names the id column. */
    static void noClientIds(String table, int atLeast) throws Exception {
        logCheckSelfTest();
        List<String> lists = insertColumnLists(table);
        check("server log: at least " + atLeast + " INSERT statements into " + table + " (" + lists.size() + ")",
                lists.size() >= atLeast, lists.size());
        List<String> bad = new ArrayList<>();
        for (String cols : lists) {
            for (String c : cols.split(",")) {
                String name = c.trim().replace("\"", "");
                if (name.equals("*") || name.equalsIgnoreCase("id")) { bad.add(cols); break; }
            }
        }
        check("server log: no INSERT into " + table + " lists the id column", bad.isEmpty(), bad);
    }

    /** The README's layout: 41 bits of ms since the epoch | 13 bits of shard | 10 bits of seq. */
    static long shardOf(long id) { return (id >> 10) & 8191; }
    static long msOf(long id) { return id >> 23; }

    /** A JSON document made and read as plain strings (no JSON library in Debian's Java set here):
     *  the id as a string, the way shard_id_to_jsonb writes it, and as a number. */
    static String toJson(long id, String note) {
        return "{\"id\":\"" + id + "\",\"id_number\":" + id + ",\"note\":\"" + note + "\"}";
    }

    static String jsonField(String json, String field) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(field) + "\"\\s*:\\s*(\"([^\"]*)\"|(-?[0-9.eE+-]+))").matcher(json);
        if (!m.find()) throw new IllegalArgumentException(field + " not in " + json);
        return m.group(2) != null ? m.group(2) : m.group(3);
    }

    private Checks() {}
}
