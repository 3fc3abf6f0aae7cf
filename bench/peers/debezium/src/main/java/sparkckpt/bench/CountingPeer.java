package sparkckpt.bench;

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;

import java.io.InputStream;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.source.SourceRecord;

/**
 * The Debezium peer of the CDC throughput benchmarks: Debezium's embedded engine with its
 * PostgreSQL connector (pgoutput) or, in the jar built with {@code -Pmariadb}, its MariaDB
 * connector (the binlog), records handed over as Kafka Connect {@link SourceRecord}s (no
 * JSON/Avro serialization), into a handler that only counts them. No Kafka, no sink.
 *
 * <p>Prints exactly one JSON line on stdout once {@code --expect} data change records arrived;
 * everything else goes to stderr. Exit codes: 0 done, 2 timeout, 3 engine failed, 64 bad usage.
 */
public final class CountingPeer {

    private static final String USAGE = String.join("\n",
            "usage: java -jar debezium-counting-peer.jar --host H --port P --user U --password PW",
            "         --database DB --tables public.a,public.b",
            "         [--connector postgres|mariadb]   (default postgres; mariadb: the -Pmariadb jar)",
            "         postgres: --slot SLOT --publication PUB",
            "         mariadb:  [--server-id N] (default 5401; the schema history goes beside the offsets)",
            "         --snapshot-mode no_data|never|initial|... --expect N --timeout-s S",
            "         --offsets-file PATH [--publication-autocreate auto|filtered|disabled|all_tables]",
            "         [--prop key=value]...   (extra/overriding Debezium properties)");

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        Properties extra = new Properties();
        for (int i = 0; i < argv.length; i++) {
            String key = argv[i];
            if (!key.startsWith("--") || i + 1 >= argv.length) {
                usage("bad argument: " + key);
            }
            String value = argv[++i];
            if (key.equals("--prop")) {
                int eq = value.indexOf('=');
                if (eq <= 0) {
                    usage("--prop wants key=value, got: " + value);
                }
                extra.setProperty(value.substring(0, eq), value.substring(eq + 1));
            } else {
                args.put(key.substring(2), value);
            }
        }
        String connector = args.getOrDefault("connector", "postgres");
        if (!connector.equals("postgres") && !connector.equals("mariadb")) {
            usage("--connector must be postgres or mariadb, got: " + connector);
        }
        for (String required : new String[] {"host", "port", "user", "password", "database",
                "tables", "snapshot-mode", "expect", "timeout-s", "offsets-file"}) {
            if (!args.containsKey(required)) {
                usage("missing --" + required);
            }
        }
        if (connector.equals("postgres")) {
            for (String required : new String[] {"slot", "publication"}) {
                if (!args.containsKey(required)) {
                    usage("missing --" + required + " (postgres)");
                }
            }
        }
        long expect = Long.parseLong(args.get("expect"));
        double timeoutS = Double.parseDouble(args.get("timeout-s"));
        if (expect < 1 || !(timeoutS > 0)) {
            usage("--expect must be at least 1 and --timeout-s positive");
        }

        // Debezium 3.x's connectors know no "never" any more (removed after 2.x): "no_data" is
        // the mode that skips the data snapshot and streams (from the slot; from the binlog's end).
        String snapshotMode = args.get("snapshot-mode").toLowerCase(Locale.ROOT);
        if (snapshotMode.equals("never")) {
            System.err.println("peer: snapshot.mode 'never' is 'no_data' in Debezium 3.x; using no_data");
            snapshotMode = "no_data";
        }

        String autocreate = args.getOrDefault("publication-autocreate", "auto");
        if (connector.equals("postgres") && autocreate.equals("auto")) {
            // An existing publication is used as it is ("disabled": Debezium neither creates nor
            // alters it); a missing one is created for exactly the included tables ("filtered").
            autocreate = publicationExists(args) ? "disabled" : "filtered";
            System.err.println("peer: publication.autocreate.mode=" + autocreate);
        }

        Properties props = new Properties();
        props.setProperty("name", "counting-peer");
        props.setProperty("topic.prefix", "peer");
        props.setProperty("database.hostname", args.get("host"));
        props.setProperty("database.port", args.get("port"));
        props.setProperty("database.user", args.get("user"));
        props.setProperty("database.password", args.get("password"));
        if (connector.equals("postgres")) {
            props.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
            props.setProperty("database.dbname", args.get("database"));
            props.setProperty("plugin.name", "pgoutput");
            // An existing slot of this name is used (streaming from its confirmed position); a
            // missing one is created by Debezium. It is never dropped on stop.
            props.setProperty("slot.name", args.get("slot"));
            props.setProperty("slot.drop.on.stop", "false");
            props.setProperty("publication.name", args.get("publication"));
            props.setProperty("publication.autocreate.mode", autocreate);
        } else {
            // Debezium's MariaDB connector (3.5.0.Final: the last on Maven Central; 3.6's MySQL
            // connector refuses MariaDB). Its schema history in a file beside the offsets; no
            // schema-change records (the peer counts data changes only).
            props.setProperty("connector.class", "io.debezium.connector.mariadb.MariaDbConnector");
            props.setProperty("database.include.list", args.get("database"));
            props.setProperty("database.server.id", args.getOrDefault("server-id", "5401"));
            props.setProperty("schema.history.internal",
                    "io.debezium.storage.file.history.FileSchemaHistory");
            props.setProperty("schema.history.internal.file.filename",
                    args.get("offsets-file") + ".history");
            props.setProperty("include.schema.changes", "false");
        }
        props.setProperty("table.include.list", args.get("tables"));
        props.setProperty("snapshot.mode", snapshotMode);

        // Offsets: a local file, flushed every second (the engine commits what the handler
        // marked processed; Debezium then confirms that LSN to the slot, on PostgreSQL).
        props.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        props.setProperty("offset.storage.file.filename", args.get("offsets-file"));
        props.setProperty("offset.flush.interval.ms", "1000");

        // Throughput settings (the peer's best case):
        //  - max.batch.size 20480 (default 2048): records per poll() handed to the handler;
        //  - max.queue.size 81920 (default 8192; must exceed max.batch.size): the buffer between
        //    the replication-stream reader thread and the engine's poll loop;
        //  - poll.interval.ms 50 (default 500): how long poll() sleeps when the queue is empty,
        //    so a poll never idles half a second while the stream is starting;
        //  - snapshot.fetch.size 20480 (default 10240): JDBC fetch size of the snapshot SELECTs;
        //  - tombstones.on.delete false: no extra null-valued record per delete;
        //  - heartbeats off and transaction metadata off (both Debezium's defaults).
        props.setProperty("max.batch.size", "20480");
        props.setProperty("max.queue.size", "81920");
        props.setProperty("poll.interval.ms", "50");
        props.setProperty("snapshot.fetch.size", "20480");
        props.setProperty("tombstones.on.delete", "false");
        props.setProperty("heartbeat.interval.ms", "0");
        props.setProperty("provide.transaction.metadata", "false");
        props.putAll(extra);

        Counter counter = new Counter(expect);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        AtomicReference<String> failureMessage = new AtomicReference<>();

        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine = DebeziumEngine
                .create(ChangeEventFormat.of(Connect.class))
                .using(props)
                .using((success, message, error) -> {
                    if (!success) {
                        failureMessage.set(message);
                        failure.set(error);
                    }
                    counter.stopped.countDown();
                })
                .notifying(counter)
                .build();

        ExecutorService executor = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "debezium-engine");
            t.setDaemon(true);
            return t;
        });
        counter.startNanos = System.nanoTime();
        executor.execute(engine);

        long deadline = counter.startNanos + (long) (timeoutS * 1e9);
        boolean reached = false;
        while (true) {
            if (counter.reached.await(50, TimeUnit.MILLISECONDS)) {
                reached = true;
                break;
            }
            if (counter.stopped.getCount() == 0 || System.nanoTime() > deadline) {
                break;
            }
        }
        try {
            engine.close();
        } catch (IllegalStateException alreadyStopped) {
            // the engine stopped on its own (failure): the completion callback says why
        }
        counter.stopped.await(30, TimeUnit.SECONDS);
        long endNanos = System.nanoTime();
        executor.shutdownNow();

        long snapshot = counter.snapshot.get();
        long stream = counter.stream.get();
        if (!reached) {
            String why = failureMessage.get() != null
                    ? "engine stopped: " + failureMessage.get()
                    : counter.stopped.getCount() == 0 && System.nanoTime() <= deadline
                            ? "engine stopped before the expected count"
                            : "timeout after " + timeoutS + " s";
            System.err.printf(Locale.ROOT, "peer: %s; got %d of %d records (snapshot %d, stream %d)%n",
                    why, snapshot + stream, expect, snapshot, stream);
            if (failure.get() != null) {
                failure.get().printStackTrace(System.err);
            }
            System.err.flush();
            Runtime.getRuntime().halt(failureMessage.get() != null ? 3 : 2);
        }

        String json = String.format(Locale.ROOT,
                "{\"peer\":\"debezium-embedded\",\"debezium_version\":\"%s\",\"records\":%d,"
                        + "\"snapshot_records\":%d,\"stream_records\":%d,\"seconds_to_first\":%.6f,"
                        + "\"seconds_to_expected\":%.6f,\"seconds_total\":%.6f}",
                debeziumVersion(), snapshot + stream, snapshot, stream,
                (counter.firstNanos - counter.startNanos) / 1e9,
                (counter.reachedNanos - counter.startNanos) / 1e9,
                (endNanos - counter.startNanos) / 1e9);
        System.out.println(json);
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(0);
    }

    /** Counts data change records per batch; marks them processed so offsets advance. */
    static final class Counter implements DebeziumEngine.ChangeConsumer<RecordChangeEvent<SourceRecord>> {
        final long expect;
        final AtomicLong snapshot = new AtomicLong();
        final AtomicLong stream = new AtomicLong();
        final CountDownLatch reached = new CountDownLatch(1);
        final CountDownLatch stopped = new CountDownLatch(1);
        volatile long startNanos;
        volatile long firstNanos;
        volatile long reachedNanos;

        Counter(long expect) {
            this.expect = expect;
        }

        @Override
        public void handleBatch(List<RecordChangeEvent<SourceRecord>> records,
                DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer)
                throws InterruptedException {
            long reads = 0;
            long changes = 0;
            for (RecordChangeEvent<SourceRecord> event : records) {
                Object value = event.record().value();
                // Data change events carry an envelope Struct with an "op" field; tombstones
                // (null value), heartbeats and other control records have none.
                if (value instanceof Struct) {
                    Struct envelope = (Struct) value;
                    Field op = envelope.schema().field("op");
                    if (op != null) {
                        String code = envelope.getString("op");
                        if ("r".equals(code)) {
                            reads++;
                        } else if ("c".equals(code) || "u".equals(code) || "d".equals(code)) {
                            changes++;
                        }
                    }
                }
                committer.markProcessed(event);
            }
            committer.markBatchFinished();
            if (reads + changes > 0) {
                long now = System.nanoTime();
                if (firstNanos == 0) {
                    firstNanos = now;
                }
                long total = snapshot.addAndGet(reads) + stream.addAndGet(changes);
                if (total >= expect && reachedNanos == 0) {
                    reachedNanos = now;
                    reached.countDown();
                }
            }
        }
    }

    private static boolean publicationExists(Map<String, String> args) {
        String url = "jdbc:postgresql://" + args.get("host") + ":" + args.get("port") + "/"
                + args.get("database");
        try (Connection conn = DriverManager.getConnection(url, args.get("user"), args.get("password"));
                PreparedStatement stmt = conn.prepareStatement(
                        "SELECT 1 FROM pg_publication WHERE pubname = ?")) {
            stmt.setString(1, args.get("publication"));
            try (ResultSet rs = stmt.executeQuery()) {
                return rs.next();
            }
        } catch (Exception e) {
            System.err.println("peer: could not check the publication (" + e.getMessage()
                    + "); assuming it does not exist");
            return false;
        }
    }

    private static String debeziumVersion() {
        try (InputStream in = CountingPeer.class.getResourceAsStream("/peer.properties")) {
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("debezium.version", "unknown");
        } catch (Exception e) {
            return "unknown";
        }
    }

    private static void usage(String message) {
        System.err.println("peer: " + message);
        System.err.println(USAGE);
        System.exit(64);
    }
}
