import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import static java.lang.System.out;

/** Plain JDBC (pgjdbc, Debian's postgresql.jar) with a next_shard_id DEFAULT. JDBC has no
 *  migrations: the schema is plain DDL in one transaction, the sequence first. */
public class JdbcTest {
    static final String T = "jdbc_photos";

    public static void main(String[] args) throws Exception {
        try (Connection c = Checks.connect()) {
            printVersions(c);
            Checks.section("1. schema", () -> schema(c));
            List<Long> ids = new ArrayList<>();
            Checks.section("2. inserts read the id back", () -> inserts(c, ids));
            Checks.section("3. JSON, shard_id_to_jsonb, masked ids", () -> json(c, ids));
            Checks.section("4. decode and a time range on the primary key", () -> decodeAndRange(c, ids));
            Checks.section("5. the client never sends an id", () -> Checks.noClientIds(T, 4));
        }
        System.exit(Checks.finish());
    }

    static void printVersions(Connection c) throws SQLException {
        out.println("pgjdbc " + c.getMetaData().getDriverVersion() + ", server "
                + c.getMetaData().getDatabaseProductVersion());
    }

    static void schema(Connection c) throws SQLException {
        c.setAutoCommit(false);
        try (Statement s = c.createStatement()) {
            s.execute("DROP TABLE IF EXISTS " + T + "; DROP SEQUENCE IF EXISTS " + T + "_id_seq");
            s.execute("CREATE SEQUENCE " + T + "_id_seq");
            s.execute("CREATE TABLE " + T + " (id bigint PRIMARY KEY DEFAULT next_shard_id('" + T
                    + "_id_seq', 5), note text NOT NULL)");
            s.execute("ALTER SEQUENCE " + T + "_id_seq OWNED BY " + T + ".id");
        }
        c.commit();
        c.setAutoCommit(true);
        try (PreparedStatement p = c.prepareStatement("SELECT format_type(a.atttypid, a.atttypmod), "
                + "pg_get_expr(d.adbin, d.adrelid), a.attnotnull FROM pg_attribute a "
                + "JOIN pg_attrdef d ON (d.adrelid, d.adnum) = (a.attrelid, a.attnum) "
                + "WHERE a.attrelid = ?::regclass AND a.attname = 'id'")) {
            p.setString(1, T);
            try (ResultSet r = p.executeQuery()) {
                Checks.check("the id column has a DEFAULT", r.next());
                Checks.equal("id is bigint", r.getString(1), "bigint");
                Checks.equal("the DEFAULT is next_shard_id", r.getString(2),
                        "next_shard_id('" + T + "_id_seq'::regclass, 5)");
                Checks.check("id is NOT NULL (primary key)", r.getBoolean(3));
            }
        }
        // JDBC's own view of it: BIGINT, and not auto-increment (that is only for serial/identity)
        try (ResultSet r = c.getMetaData().getColumns(null, "public", T, "id")) {
            r.next();
            Checks.equal("DatabaseMetaData: DATA_TYPE is Types.BIGINT", r.getInt("DATA_TYPE"), java.sql.Types.BIGINT);
            Checks.equal("DatabaseMetaData: COLUMN_DEF", r.getString("COLUMN_DEF"),
                    "next_shard_id('" + T + "_id_seq'::regclass, 5)");
            Checks.equal("DatabaseMetaData: IS_AUTOINCREMENT is NO (only serial/identity count)",
                    r.getString("IS_AUTOINCREMENT"), "NO");
        }
    }

    static String serverId(Connection c, String note) throws SQLException {
        try (PreparedStatement p = c.prepareStatement("SELECT id::text FROM " + T + " WHERE note = ?")) {
            p.setString(1, note);
            try (ResultSet r = p.executeQuery()) { r.next(); return r.getString(1); }
        }
    }

    static void inserts(Connection c, List<Long> ids) throws SQLException {
        // single: prepareStatement(sql, {"id"}) makes pgjdbc append RETURNING "id"
        try (PreparedStatement p = c.prepareStatement("INSERT INTO " + T + " (note) VALUES (?)", new String[] {"id"})) {
            p.setString(1, "one");
            Checks.equal("single insert: 1 row", p.executeUpdate(), 1);
            try (ResultSet k = p.getGeneratedKeys()) {
                Checks.check("single insert: getGeneratedKeys has the row", k.next());
                Object o = k.getObject(1);
                Checks.equal("the id comes back as java.lang.Long", o.getClass().getName(), "java.lang.Long");
                long id = k.getLong("id");
                Checks.check("the id is above 2^53 (a double would round it)", id > (1L << 53), id);
                Checks.equal("single insert: getGeneratedKeys = SELECT id::text", Long.toString(id), serverId(c, "one"));
                ids.add(id);
                // pitfall: an int does not hold it
                try {
                    k.getInt(1);
                    Checks.check("getInt on the id fails (it does not fit an int)", false, "no exception");
                } catch (SQLException e) {
                    Checks.equal("getInt on the id fails with 22003 (numeric value out of range)", e.getSQLState(), "22003");
                }
            }
        }
        // Statement.RETURN_GENERATED_KEYS: pgjdbc appends RETURNING *, every column comes back
        try (PreparedStatement p = c.prepareStatement("INSERT INTO " + T + " (note) VALUES (?)", Statement.RETURN_GENERATED_KEYS)) {
            p.setString(1, "two");
            p.executeUpdate();
            try (ResultSet k = p.getGeneratedKeys()) {
                k.next();
                Checks.equal("RETURN_GENERATED_KEYS: getLong(\"id\") = SELECT id::text", Long.toString(k.getLong("id")), serverId(c, "two"));
                ids.add(k.getLong("id"));
            }
        }
        // batch of 500: executeBatch, then every generated key
        for (boolean rewrite : new boolean[] {false, true}) {
            String tag = rewrite ? "b2_" : "b1_";
            try (Connection bc = rewrite ? java.sql.DriverManager.getConnection(Checks.url() + "&reWriteBatchedInserts=true") : null) {
                Connection conn = rewrite ? bc : c;
                List<Long> got = new ArrayList<>();
                try (PreparedStatement p = conn.prepareStatement("INSERT INTO " + T + " (note) VALUES (?)", new String[] {"id"})) {
                    for (int i = 0; i < 500; i++) { p.setString(1, tag + i); p.addBatch(); }
                    int[] counts = p.executeBatch();
                    Checks.equal("batch" + (rewrite ? " (reWriteBatchedInserts)" : "") + ": 500 counts", counts.length, 500);
                    try (ResultSet k = p.getGeneratedKeys()) { while (k.next()) got.add(k.getLong(1)); }
                }
                List<Long> server = new ArrayList<>();
                try (PreparedStatement p = c.prepareStatement("SELECT id::text FROM " + T + " WHERE note LIKE ? ORDER BY id")) {
                    p.setString(1, tag + "%");
                    try (ResultSet r = p.executeQuery()) { while (r.next()) server.add(Long.parseLong(r.getString(1))); }
                }
                List<Long> sorted = new ArrayList<>(got);
                sorted.sort(null);
                Checks.equal("batch" + (rewrite ? " (reWriteBatchedInserts)" : "") + ": 500 generated keys, = SELECT id::text",
                        sorted, server);
                Checks.equal("batch" + (rewrite ? " (reWriteBatchedInserts)" : "") + ": keys distinct", new HashSet<>(got).size(), 500);
                ids.addAll(got);
            }
        }
    }

    static void json(Connection c, List<Long> ids) throws SQLException {
        int lostByDouble = 0;
        for (long id : ids.subList(0, 50)) {
            String doc = Checks.toJson(id, "n");
            long back = Long.parseLong(Checks.jsonField(doc, "id"));
            if (back != id) { Checks.check("JSON string round trip of " + id, false, back); return; }
            if (Long.parseLong(Checks.jsonField(doc, "id_number")) != id) { Checks.check("JSON number round trip", false, id); return; }
            // what a JavaScript reader (or Jackson's default for floats) does with the number
            if ((long) Double.parseDouble(Checks.jsonField(doc, "id_number")) != id) lostByDouble++;
        }
        Checks.check("JSON: 50 ids through a string and a number, every digit kept (long)", true);
        Checks.check("pitfall: read as a double (JavaScript's Number), ids lose digits (" + lostByDouble + " of 50)", lostByDouble > 0, lostByDouble);
        long first = ids.get(0);
        long parsed = Long.parseLong(Checks.jsonField(Checks.toJson(first, "one"), "id"));
        try (PreparedStatement p = c.prepareStatement("SELECT note FROM " + T + " WHERE id = ?")) {
            p.setLong(1, parsed);
            try (ResultSet r = p.executeQuery()) {
                Checks.check("lookup by the id parsed from JSON finds the row", r.next() && r.getString(1).equals("one"));
            }
        }
        try (PreparedStatement p = c.prepareStatement("SELECT shard_id_to_jsonb(p), shard_id_to_jsonb(p.id) FROM " + T + " p WHERE id = ?")) {
            p.setLong(1, first);
            try (ResultSet r = p.executeQuery()) {
                r.next();
                Object o = r.getObject(1);
                Checks.equal("shard_id_to_jsonb comes back as a PGobject of type jsonb", o.getClass().getName() + "/"
                        + ((org.postgresql.util.PGobject) o).getType(), "org.postgresql.util.PGobject/jsonb");
                Checks.equal("shard_id_to_jsonb(row) has the id as a string", r.getString(1),
                        "{\"id\": \"" + first + "\", \"note\": \"one\"}");
                Checks.equal("shard_id_to_jsonb(id) is a JSON string", r.getString(2), "\"" + first + "\"");
                Checks.equal("its id parses back", Long.parseLong(Checks.jsonField(r.getString(1), "id")), first);
            }
        }
        // masked forms (the cluster has a key, run.sh): the shortcode goes out, comes back as a parameter
        String code;
        long masked;
        try (PreparedStatement p = c.prepareStatement("SELECT shard_id_mask_shortcode(?, 'photos'), shard_id_mask(?, 'photos')")) {
            p.setLong(1, first);
            p.setLong(2, first);
            try (ResultSet r = p.executeQuery()) { r.next(); code = r.getString(1); masked = r.getLong(2); }
        }
        Checks.check("masked shortcode: 12 URL-safe characters (" + code + ")", code.matches("[A-Za-z0-9_-]{12}"), code);
        Checks.check("masked bigint differs from the id", masked != first, masked);
        try (PreparedStatement p = c.prepareStatement("SELECT id, note FROM " + T + " WHERE id = shard_id_unmask_shortcode(?, 'photos')")) {
            p.setString(1, Checks.jsonField("{\"url\":\"" + code + "\"}", "url"));
            try (ResultSet r = p.executeQuery()) {
                Checks.check("masked shortcode from JSON finds the row", r.next() && r.getLong(1) == first && r.getString(2).equals("one"));
            }
        }
        try (PreparedStatement p = c.prepareStatement("SELECT shard_id_unmask(?, 'photos')")) {
            p.setLong(1, masked);
            try (ResultSet r = p.executeQuery()) { r.next(); Checks.equal("shard_id_unmask(masked bigint) = id", r.getLong(1), first); }
        }
    }

    static void decodeAndRange(Connection c, List<Long> ids) throws SQLException {
        OffsetDateTime epoch;
        try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("SELECT epoch FROM pg_shard_id_info()")) {
            r.next();
            epoch = r.getObject(1, OffsetDateTime.class);
        }
        long id = ids.get(0);
        try (PreparedStatement p = c.prepareStatement("SELECT ts, shard, seq FROM shard_id_decode(?)")) {
            p.setLong(1, id);
            try (ResultSet r = p.executeQuery()) {
                r.next();
                Checks.equal("shard_id_decode: shard 5", r.getInt("shard"), 5);
                Checks.equal("shard_id_decode: shard = the client's own decode", (long) r.getInt("shard"), Checks.shardOf(id));
                Checks.equal("shard_id_decode: seq = id & 1023", (long) r.getInt("seq"), id & 1023);
                OffsetDateTime ts = r.getObject("ts", OffsetDateTime.class);
                Checks.equal("shard_id_decode: ts = epoch + (id >> 23) ms", ts.toInstant(),
                        epoch.toInstant().plusMillis(Checks.msOf(id)));
            }
        }
        // the lower bound of the first row's millisecond: every row is at or after it
        OffsetDateTime from = epoch.plusNanos(Checks.msOf(id) * 1_000_000L);
        try (Statement s = c.createStatement()) {
            // the table is tiny: without this the planner rightly prefers a sequential scan
            s.execute("SET enable_seqscan = off");
        }
        String q = "SELECT count(*) FROM " + T + " WHERE id >= shard_id_lower_bound(?)";
        StringBuilder plan = new StringBuilder();
        try (PreparedStatement p = c.prepareStatement("EXPLAIN " + q)) {
            p.setObject(1, from);
            try (ResultSet r = p.executeQuery()) { while (r.next()) plan.append(r.getString(1)).append('\n'); }
        }
        Checks.check("EXPLAIN of WHERE id >= shard_id_lower_bound(ts) uses " + T + "_pkey",
                plan.toString().matches("(?s).*(Index Scan|Index Only Scan) (using|on) " + T + "_pkey .*")
                        && plan.toString().contains("Index Cond: (id >= shard_id_lower_bound("), plan);
        try (PreparedStatement p = c.prepareStatement(q)) {
            p.setObject(1, from);
            try (ResultSet r = p.executeQuery()) { r.next(); Checks.equal("the range finds every row", r.getLong(1), (long) ids.size()); }
            p.setObject(1, OffsetDateTime.now().plusHours(1));
            try (ResultSet r = p.executeQuery()) { r.next(); Checks.equal("an hour ahead finds none", r.getLong(1), 0L); }
        }
        try (Statement s = c.createStatement()) { s.execute("RESET enable_seqscan"); }
    }
}
