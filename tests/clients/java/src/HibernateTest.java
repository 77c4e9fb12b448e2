import java.math.BigInteger;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

import org.hibernate.Hibernate;
import org.hibernate.Session;
import org.hibernate.SessionFactory;
import org.hibernate.Transaction;
import org.hibernate.cfg.Configuration;
import org.hibernate.dialect.PostgreSQLDialect;
import org.hibernate.jdbc.Work;

import static java.lang.System.out;

/** Hibernate 3.6 (Debian's libhibernate3-java) with a next_shard_id DEFAULT on the id. */
public class HibernateTest {
    static final String T = "hb_photos";
    static final String DDL = "CREATE SEQUENCE hb_photos_id_seq;\n"
            + "CREATE TABLE hb_photos (id bigint PRIMARY KEY DEFAULT next_shard_id('hb_photos_id_seq', 6), note text NOT NULL);\n"
            + "ALTER SEQUENCE hb_photos_id_seq OWNED BY hb_photos.id";

    static Configuration config(String... props) {
        Configuration cfg = new Configuration()
                .addAnnotatedClass(HibernatePhoto.class)
                .setProperty("hibernate.connection.driver_class", "org.postgresql.Driver")
                .setProperty("hibernate.connection.url", Checks.url())
                .setProperty("hibernate.dialect", PostgreSQLDialect.class.getName())
                .setProperty("hibernate.jdbc.batch_size", "50");
        for (int i = 0; i < props.length; i += 2) cfg.setProperty(props[i], props[i + 1]);
        return cfg;
    }

    static void sql(Session s, String sql) {
        s.doWork(new Work() { public void execute(Connection c) throws SQLException {
            try (Statement st = c.createStatement()) { st.execute(sql); }
        } });
    }

    static String serverId(Session s, String note) {
        return (String) s.createSQLQuery("SELECT CAST(id AS text) FROM hb_photos WHERE note = :n").setString("n", note).uniqueResult();
    }

    public static void main(String[] args) throws Exception {
        out.println("Hibernate " + org.hibernate.Version.class.getPackage().getImplementationVersion()
                + ", pgjdbc " + org.postgresql.Driver.class.getPackage().getImplementationVersion());
        Checks.section("1. schema: hbm2ddl", HibernateTest::hbm2ddl);
        SessionFactory sf = config("hibernate.hbm2ddl.auto", "validate").buildSessionFactory();
        List<Long> ids = new ArrayList<>();
        Checks.section("2. save() and a batch read the id back", () -> inserts(sf, ids));
        Checks.section("2b. pitfall: without getGeneratedKeys Hibernate asks currval()", HibernateTest::currvalPitfall);
        Checks.section("3. JSON, shard_id_to_jsonb, masked ids", () -> json(sf, ids));
        Checks.section("4. decode and a time range on the primary key", () -> decodeAndRange(sf, ids));
        Checks.section("5. the client never sends an id", () -> Checks.noClientIds(T, 4));
        sf.close();
        System.exit(Checks.finish());
    }

    /** What hbm2ddl makes of the mapping, then the schema by hand (the migration) and validate. */
    static void hbm2ddl() throws Exception {
        Configuration cfg = config();
        SessionFactory clean = cfg.buildSessionFactory();
        Session c0 = clean.openSession();
        Transaction t0 = c0.beginTransaction(); // Hibernate's connections are not in autocommit
        sql(c0, "DROP TABLE IF EXISTS hb_photos; DROP SEQUENCE IF EXISTS hb_photos_id_seq");
        t0.commit();
        c0.close();
        clean.close();
        String[] create = cfg.generateSchemaCreationScript(new PostgreSQLDialect());
        String script = String.join(";\n", create);
        out.println("   hbm2ddl would run: " + script.replace("\n", "\n   "));
        Checks.check("hbm2ddl: the id becomes bigserial (its own sequence and DEFAULT)", script.matches("(?s).*id +bigserial not null.*"), script);
        Checks.check("hbm2ddl: the next_shard_id DEFAULT (columnDefinition) is dropped", !script.contains("next_shard_id"), script);
        Checks.check("hbm2ddl: hb_photos_id_seq is not created", !script.toLowerCase().contains("create sequence"), script);
        // hbm2ddl.auto=create for real: the ids it then makes are a serial's 1, 2, ..., shard 0
        SessionFactory sf = config("hibernate.hbm2ddl.auto", "create").buildSessionFactory();
        Session s = sf.openSession();
        Transaction tx = s.beginTransaction();
        HibernatePhoto p = new HibernatePhoto("serial");
        s.save(p);
        tx.commit();
        Checks.equal("hbm2ddl's table: the first id is the serial's 1, not a shard id", p.getId(), 1L);
        Object def = s.createSQLQuery("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = CAST('hb_photos' AS regclass)").uniqueResult();
        Checks.equal("hbm2ddl's table: DEFAULT is nextval of its serial", def, "nextval('hb_photos_id_seq'::regclass)");
        tx = s.beginTransaction();
        sql(s, "DROP TABLE hb_photos"); // and its serial's sequence, also named hb_photos_id_seq
        tx.commit();
        s.close();
        sf.close();
        // the migration by hand, the sequence first; hbm2ddl.auto=validate then accepts it
        sf = config().buildSessionFactory();
        s = sf.openSession();
        tx = s.beginTransaction();
        for (String stmt : DDL.split(";\n")) sql(s, stmt);
        tx.commit();
        s.close();
        sf.close();
        try {
            config("hibernate.hbm2ddl.auto", "validate").buildSessionFactory().close();
            Checks.check("hbm2ddl.auto=validate accepts the hand-made table", true);
        } catch (Exception e) {
            Checks.check("hbm2ddl.auto=validate accepts the hand-made table", false, e);
        }
    }

    static void inserts(SessionFactory sf, List<Long> ids) throws Exception {
        Session s = sf.openSession();
        Transaction tx = s.beginTransaction();
        HibernatePhoto one = new HibernatePhoto("one");
        Object key = s.save(one); // the INSERT runs now (identity), RETURNING *
        Checks.equal("save() returns a java.lang.Long", key.getClass().getName(), "java.lang.Long");
        Checks.check("the id is above 2^53", one.getId() > (1L << 53), one.getId());
        tx.commit();
        Checks.equal("save(): the entity's id = SELECT id::text", one.getId().toString(), serverId(s, "one"));
        ids.add(one.getId());
        int before = Checks.insertColumnLists(T).size();
        tx = s.beginTransaction();
        List<HibernatePhoto> batch = new ArrayList<>();
        for (int i = 0; i < 300; i++) {
            HibernatePhoto p = new HibernatePhoto("b" + i);
            s.persist(p);
            batch.add(p);
        }
        tx.commit();
        List<Long> got = new ArrayList<>();
        for (HibernatePhoto p : batch) got.add(p.getId());
        got.sort(null);
        List<Long> server = new ArrayList<>();
        for (Object o : s.createSQLQuery("SELECT CAST(id AS text) FROM hb_photos WHERE note LIKE 'b%' ORDER BY id").list())
            server.add(Long.parseLong((String) o));
        Checks.equal("persist() x300 in one transaction: every entity's id = SELECT id::text", got, server);
        ids.addAll(got);
        // IDENTITY turns JDBC batching off (hibernate.jdbc.batch_size = 50 is set): one INSERT a row
        Checks.equal("identity: 300 persist() are 300 single-row INSERTs despite batch_size = 50",
                Checks.insertColumnLists(T).size() - before, 300);
        Checks.check("and Hibernate's INSERT reads the key with RETURNING * (getGeneratedKeys)",
                Checks.logText().matches("(?s).*insert into hb_photos \\(note\\) values \\(\\$1\\)\\s+RETURNING \\*.*"));
        s.clear();
        Checks.equal("session.get(Photo, id) finds the row", ((HibernatePhoto) s.get(HibernatePhoto.class, one.getId())).getNote(), "one");
        s.close();
    }

    /** With hibernate.jdbc.use_get_generated_keys=false, PostgreSQLDialect's identity select is
     *  "select currval('hb_photos_id_seq')": the sequence's own number, not the id the DEFAULT made.
     *  The table's sequence is named <table>_<column>_seq as the README does, so this runs and
     *  silently gives the entity a wrong id. */
    static void currvalPitfall() {
        SessionFactory sf = config("hibernate.jdbc.use_get_generated_keys", "false").buildSessionFactory();
        Session s = sf.openSession();
        Transaction tx = s.beginTransaction();
        HibernatePhoto p = new HibernatePhoto("currval");
        s.save(p);
        tx.commit();
        String server = serverId(s, "currval");
        Object last = s.createSQLQuery("SELECT last_value FROM hb_photos_id_seq").uniqueResult();
        Checks.check("use_get_generated_keys=false: the entity gets the sequence's number (" + p.getId()
                + "), not the row's id (" + server + ")", !p.getId().toString().equals(server) && p.getId().toString().equals(last.toString()),
                p.getId() + " vs " + server);
        s.close();
        sf.close();
        Checks.check("so the default (true: pgjdbc supports getGeneratedKeys) must stay", true);
    }

    static void json(SessionFactory sf, List<Long> ids) {
        Session s = sf.openSession();
        long first = ids.get(0);
        String doc = Checks.toJson(first, "one");
        long parsed = Long.parseLong(Checks.jsonField(doc, "id"));
        Checks.equal("JSON: the id through a string keeps every digit", parsed, first);
        Checks.equal("JSON: the id through a number keeps every digit (long)", Long.parseLong(Checks.jsonField(doc, "id_number")), first);
        int lost = 0;
        for (long i : ids) if ((long) Double.parseDouble(Checks.jsonField(Checks.toJson(i, "n"), "id_number")) != i) lost++;
        Checks.check("pitfall: read as a double (JavaScript's Number), ids lose digits (" + lost + " of " + ids.size() + ")", lost > 0, lost);
        Checks.equal("lookup by the parsed id: session.get", ((HibernatePhoto) s.get(HibernatePhoto.class, parsed)).getNote(), "one");
        Checks.equal("lookup by the parsed id: HQL", s.createQuery("select p.note from HibernatePhoto p where p.id = :id")
                .setLong("id", parsed).uniqueResult(), "one");
        // a native query returning jsonb: Hibernate 3.6 has no mapping for it (Types.OTHER)
        try {
            s.createSQLQuery("SELECT shard_id_to_jsonb(p) FROM hb_photos p WHERE id = :id").setLong("id", first).uniqueResult();
            Checks.check("pitfall: a jsonb column in a native query fails (No Dialect mapping for JDBC type: 1111)", false, "no exception");
        } catch (org.hibernate.MappingException e) {
            Checks.check("pitfall: a jsonb column in a native query fails (" + e.getMessage() + ")", e.getMessage().contains("1111"), e);
        }
        // and "::text" is not the way out: Hibernate 3.6 reads ":text" as a named parameter
        try {
            s.createSQLQuery("SELECT shard_id_to_jsonb(p)::text FROM hb_photos p WHERE id = :id").setLong("id", first).uniqueResult();
            Checks.check("pitfall: '::' in a native query is taken for a named parameter", false, "no exception");
        } catch (org.hibernate.QueryException e) {
            Checks.check("pitfall: '::' in a native query is taken for a named parameter (" + e.getMessage() + ")",
                    e.getMessage().contains("[:text]"), e);
        }
        Object j = s.createSQLQuery("SELECT CAST(shard_id_to_jsonb(p) AS text) FROM hb_photos p WHERE id = :id").setLong("id", first).uniqueResult();
        Checks.equal("CAST(shard_id_to_jsonb(row) AS text) has the id as a string", j, "{\"id\": \"" + first + "\", \"note\": \"one\"}");
        Checks.equal("its id parses back", Long.parseLong(Checks.jsonField((String) j, "id")), first);
        // native bigint results: BigInteger unless told otherwise (Dialect maps Types.BIGINT so)
        Object masked = s.createSQLQuery("SELECT shard_id_mask(:id, 'photos')").setLong("id", first).uniqueResult();
        Checks.equal("pitfall: a native query's bigint comes back as java.math.BigInteger", masked.getClass().getName(), BigInteger.class.getName());
        Object unmasked = s.createSQLQuery("SELECT shard_id_unmask(:m, 'photos') AS v").addScalar("v", Hibernate.LONG)
                .setLong("m", ((BigInteger) masked).longValueExact()).uniqueResult();
        Checks.equal("with addScalar(LONG) a Long: shard_id_unmask(masked) = id", unmasked, first);
        String code = (String) s.createSQLQuery("SELECT shard_id_mask_shortcode(:id, 'photos')").setLong("id", first).uniqueResult();
        Checks.check("masked shortcode: 12 URL-safe characters (" + code + ")", code.matches("[A-Za-z0-9_-]{12}"), code);
        Long back = (Long) s.createSQLQuery("SELECT shard_id_unmask_shortcode(:c, 'photos') AS v").addScalar("v", Hibernate.LONG)
                .setString("c", Checks.jsonField("{\"url\":\"" + code + "\"}", "url")).uniqueResult();
        Checks.equal("masked shortcode from JSON finds the entity", ((HibernatePhoto) s.get(HibernatePhoto.class, back)).getNote(), "one");
        s.close();
    }

    static void decodeAndRange(SessionFactory sf, List<Long> ids) {
        Session s = sf.openSession();
        long first = ids.get(0);
        Object[] d = (Object[]) s.createSQLQuery("SELECT shard, seq, CAST(extract(epoch FROM ts - (SELECT epoch FROM pg_shard_id_info())) * 1000 AS bigint) AS ms FROM shard_id_decode(:id)")
                .addScalar("shard", Hibernate.INTEGER).addScalar("seq", Hibernate.INTEGER).addScalar("ms", Hibernate.LONG)
                .setLong("id", first).uniqueResult();
        Checks.equal("shard_id_decode: shard 6", d[0], 6);
        Checks.equal("shard_id_decode: shard = the client's decode", ((Integer) d[0]).longValue(), Checks.shardOf(first));
        Checks.equal("shard_id_decode: seq = id & 1023", ((Integer) d[1]).longValue(), first & 1023);
        Checks.equal("shard_id_decode: ms since the epoch = id >> 23", d[2], Checks.msOf(first));
        Transaction tx = s.beginTransaction();
        // the table is tiny: without this the planner rightly prefers a sequential scan
        sql(s, "SET LOCAL enable_seqscan = off");
        final StringBuilder plan = new StringBuilder();
        final long from = first;
        s.doWork(new Work() { public void execute(Connection c) throws SQLException {
            try (java.sql.PreparedStatement p = c.prepareStatement("EXPLAIN SELECT * FROM hb_photos WHERE id >= shard_id_lower_bound(shard_id_extract_timestamp(?))")) {
                p.setLong(1, from);
                try (ResultSet r = p.executeQuery()) { while (r.next()) plan.append(r.getString(1)).append('\n'); }
            }
        } });
        Checks.check("EXPLAIN of WHERE id >= shard_id_lower_bound(ts) uses hb_photos_pkey",
                plan.toString().matches("(?s).*(Index Scan|Index Only Scan) (using|on) hb_photos_pkey .*")
                        && plan.toString().contains("Index Cond: (id >= shard_id_lower_bound("), plan);
        Long lb = (Long) s.createSQLQuery("SELECT shard_id_lower_bound(shard_id_extract_timestamp(:id)) AS v").addScalar("v", Hibernate.LONG)
                .setLong("id", first).uniqueResult();
        Object n = s.createQuery("select count(p) from HibernatePhoto p where p.id >= :lb").setLong("lb", lb).uniqueResult();
        Checks.equal("HQL: id >= the first row's lower bound finds all " + ids.size() + " (+1 currval row)", n, (long) ids.size() + 1);
        tx.commit();
        s.close();
    }
}
