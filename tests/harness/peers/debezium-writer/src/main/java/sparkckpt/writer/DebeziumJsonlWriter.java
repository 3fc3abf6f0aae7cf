package sparkckpt.writer;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import software.amazon.awssdk.core.exception.AbortedException;
import software.amazon.awssdk.core.exception.SdkException;
import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.http.urlconnection.UrlConnectionHttpClient;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.S3ClientBuilder;
import software.amazon.awssdk.services.s3.model.GetObjectRequest;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Response;
import software.amazon.awssdk.services.s3.model.PutObjectRequest;
import software.amazon.awssdk.services.s3.model.S3Exception;
import software.amazon.awssdk.services.s3.model.S3Object;

import java.io.BufferedWriter;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.Arrays;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.ReentrantLock;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A real Debezium producer for the tests: Debezium's embedded engine (PostgreSQL, MySQL or
 * MariaDB connector) converting every record with Kafka Connect's JsonConverter and writing its
 * <em>value</em> as one line of JSONL files, the way an object-store sink writes them. The same
 * source is built twice (README.md): on Debezium 3.6.1.Final (PostgreSQL, MySQL) and on
 * 3.5.0.Final (MariaDB, whose connector has no later release): it uses no API that differs.
 *
 * <p>Lines go to an in-progress file {@code .NNNNNNNNNN.jsonl.inprogress} in the output
 * directory, which is fsynced and atomically renamed to {@code NNNNNNNNNN.jsonl} once it holds
 * {@code --roll-records} records or {@code --roll-ms} passed since its first record. Records are
 * marked processed with the engine (so their offsets may be flushed) only once their file was
 * published, and only up to a <em>transaction boundary</em>: the last published transaction
 * {@code END}, or a record outside any transaction (snapshot rows, schema changes, heartbeats),
 * never a record between a {@code BEGIN} and its {@code END} (debezium/dbz#1554: a PostgreSQL
 * offset inside a transaction can make a restart skip the rest of it). A SIGKILL loses the
 * unpublished tail and Debezium repeats it, and possibly more, from its last flushed offset
 * (at-least-once): at least the whole transaction that was open. A restart deletes a leftover
 * in-progress file and continues the sequence after the highest published file.
 *
 * <p>With {@code --out s3://bucket/prefix} the in-progress file is spooled beside the offsets file
 * and published as one {@code PutObject} of the whole file under its final key
 * {@code prefix/NNNNNNNNNN.jsonl} (an S3 object appears whole or not at all: that is the atomic
 * publish), with {@code If-None-Match: *} so a published object is never replaced. Records are
 * marked processed only once the {@code PutObject} returned. A restart continues the sequence
 * after the highest key under the prefix ({@code ListObjectsV2}). Credentials and region come from
 * the AWS SDK's default chains (environment, profile, instance or container role), the endpoint
 * from {@code --s3-endpoint}, {@code AWS_ENDPOINT_URL_S3} or {@code AWS_ENDPOINT_URL}.
 *
 * <p>Stdout carries only the writer's JSON lines: {@code {"ready": true}} once the connector's
 * task started, then one {@code {"file": "...", "records": N}} per published file. Everything
 * else goes to stderr. SIGTERM publishes the in-progress file and closes the engine gracefully
 * (exit 0). Exit codes: 3 engine failed, 64 bad usage.
 */
public final class DebeziumJsonlWriter {

    private static final String USAGE = String.join("\n",
            "usage: java -jar JAR --connector CONNECTOR --out DIR|s3://BUCKET/PREFIX --offsets-file PATH",
            "         --host H --port P --user U (--password PW | --password-env VAR)",
            "         --database DB [--tables T1,T2]",
            "  JAR: target/debezium-writer.jar for postgres|mysql (Debezium 3.6.1.Final),",
            "       target/debezium-jsonl-writer-mariadb.jar for mariadb (Debezium 3.5.0.Final)",
            "  [--schemas true|false]         JsonConverter schemas.enable (default true)",
            "  [--tombstones true|false]      tombstones.on.delete (default true)",
            "  [--snapshot-mode MODE]         default initial",
            "  [--topic-prefix P]             default dbz",
            "  [--roll-records N]             default 500",
            "  [--roll-ms MS]                 default 500",
            "  [--offset-flush-ms MS]         offset.flush.interval.ms, default 1000",
            "  [--slot S] [--publication P]   postgres, default dbz_writer / dbz_writer_pub",
            "  [--server-id N]                mariadb/mysql, default random in 5400-6400",
            "  [--history-file PATH]          mariadb/mysql, default <offsets-file>.history",
            "  [--prop key=value]...          add/override any engine or connector property",
            "  S3 (--out s3://...): credentials and region from the AWS default chains",
            "  (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, profiles, roles)",
            "  [--s3-endpoint URL]            default $AWS_ENDPOINT_URL_S3, else $AWS_ENDPOINT_URL, else AWS",
            "  [--s3-path-style true|false]   path-style requests (MinIO, moto), default false",
            "  [--s3-conditional-put true|false]  If-None-Match: * on each PutObject, default true");

    private static final Pattern FINAL_NAME = Pattern.compile("(\\d{10})\\.jsonl");
    private static final Pattern IN_PROGRESS_NAME = Pattern.compile("\\.\\d{10}\\.jsonl\\.inprogress");

    private static final String POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector";
    private static final String MYSQL_CONNECTOR = "io.debezium.connector.mysql.MySqlConnector";
    private static final String MARIADB_CONNECTOR = "io.debezium.connector.mariadb.MariaDbConnector";

    private static final PrintStream OUT = System.out;

    public static void main(String[] argv) throws Exception {
        // The binlog client (MariaDB, MySQL) logs through java.util.logging, at INFO: hold it to
        // warnings like the SLF4J loggers, unless their level was lowered on the command line.
        String level = System.getProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        if (level.equals("warn") || level.equals("error") || level.equals("off")) {
            java.util.logging.Logger.getLogger("").setLevel(java.util.logging.Level.WARNING);
        }
        Map<String, String> args = new LinkedHashMap<>();
        Properties extra = new Properties();
        for (int i = 0; i < argv.length; i++) {
            String key = argv[i];
            if (key.equals("--help") || key.equals("-h")) {
                System.err.println(USAGE);
                System.exit(0);
            }
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
        for (String required : new String[] {"connector", "out", "offsets-file", "host", "port",
                "user", "database"}) {
            if (!args.containsKey(required)) {
                usage("missing --" + required);
            }
        }
        String password = args.get("password");
        if (password == null && args.containsKey("password-env")) {
            password = System.getenv(args.get("password-env"));
            if (password == null) {
                usage("environment variable " + args.get("password-env") + " is not set");
            }
        }
        if (password == null) {
            usage("missing --password or --password-env");
        }
        String connector = args.get("connector").toLowerCase(Locale.ROOT);
        boolean schemas = bool(args, "schemas", true);
        boolean tombstones = bool(args, "tombstones", true);
        int rollRecords = positive(args, "roll-records", 500);
        long rollMs = positive(args, "roll-ms", 500);
        long flushMs = positive(args, "offset-flush-ms", 1000);
        String outArg = args.get("out");
        boolean s3 = outArg.startsWith("s3://") || outArg.startsWith("s3a://");
        for (String option : new String[] {"s3-endpoint", "s3-path-style", "s3-conditional-put"}) {
            if (!s3 && args.containsKey(option)) {
                usage("--" + option + " is for an s3:// --out only");
            }
        }
        boolean pathStyle = bool(args, "s3-path-style", false);
        boolean conditionalPut = bool(args, "s3-conditional-put", true);
        Path offsets = Paths.get(args.get("offsets-file")).toAbsolutePath();

        Properties props = new Properties();
        props.setProperty("name", "debezium-writer");
        props.setProperty("topic.prefix", args.getOrDefault("topic-prefix", "dbz"));
        props.setProperty("database.hostname", args.get("host"));
        props.setProperty("database.port", args.get("port"));
        props.setProperty("database.user", args.get("user"));
        props.setProperty("database.password", password);
        if (args.containsKey("tables")) {
            props.setProperty("table.include.list", args.get("tables"));
        }
        props.setProperty("snapshot.mode", args.getOrDefault("snapshot-mode", "initial"));
        props.setProperty("provide.transaction.metadata", "true");
        props.setProperty("decimal.handling.mode", "precise");
        props.setProperty("tombstones.on.delete", Boolean.toString(tombstones));
        props.setProperty("heartbeat.interval.ms", "0");
        props.setProperty("converter.schemas.enable", Boolean.toString(schemas));
        // Kafka's file store, saved atomically: see AtomicFileOffsetBackingStore.
        props.setProperty("offset.storage", AtomicFileOffsetBackingStore.class.getName());
        props.setProperty("offset.storage.file.filename", offsets.toString());
        props.setProperty("offset.flush.interval.ms", Long.toString(flushMs));
        switch (connector) {
            case "postgres":
            case "postgresql":
                requireConnector(POSTGRES_CONNECTOR, connector);
                props.setProperty("connector.class", POSTGRES_CONNECTOR);
                props.setProperty("database.dbname", args.get("database"));
                props.setProperty("plugin.name", "pgoutput");
                props.setProperty("slot.name", args.getOrDefault("slot", "dbz_writer"));
                props.setProperty("slot.drop.on.stop", "false");
                props.setProperty("publication.name", args.getOrDefault("publication", "dbz_writer_pub"));
                props.setProperty("publication.autocreate.mode", "filtered");
                break;
            case "mariadb":
            case "mysql":
                // MariaDB needs Debezium's MariaDB connector (3.6.1's MySQL connector refuses a
                // MariaDB server): it is only in the jar built on 3.5.0.Final (README.md).
                String connectorClass = connector.equals("mariadb") ? MARIADB_CONNECTOR : MYSQL_CONNECTOR;
                requireConnector(connectorClass, connector);
                props.setProperty("connector.class", connectorClass);
                props.setProperty("database.include.list", args.get("database"));
                props.setProperty("database.server.id", args.getOrDefault("server-id",
                        Integer.toString(ThreadLocalRandom.current().nextInt(5400, 6401))));
                props.setProperty("schema.history.internal",
                        "io.debezium.storage.file.history.FileSchemaHistory");
                props.setProperty("schema.history.internal.file.filename",
                        args.containsKey("history-file")
                                ? Paths.get(args.get("history-file")).toAbsolutePath().toString()
                                : offsets + ".history");
                // Schema-change records (DDL) on the topic <prefix>: the tests read them too.
                props.setProperty("include.schema.changes", "true");
                break;
            default:
                usage("--connector must be postgres, mariadb or mysql, got: " + connector);
        }
        props.putAll(extra);

        if (offsets.getParent() != null) {
            Files.createDirectories(offsets.getParent());
        }
        Output output;
        if (s3) {
            // The in-progress file is spooled locally beside the offsets (kept across restarts,
            // so a leftover is found and deleted), and uploaded whole when it is published.
            Path spool = offsets.getParent() != null ? offsets.getParent() : Paths.get("").toAbsolutePath();
            output = S3Output.open(outArg, args.get("s3-endpoint"), pathStyle, conditionalPut, spool);
        } else {
            Path out = Paths.get(outArg).toAbsolutePath();
            Files.createDirectories(out);
            output = new LocalOutput(out);
        }
        String transactionTopic = props.getProperty("topic.prefix") + "."
                + props.getProperty("topic.transaction", "transaction");
        FileRoller roller;
        try {
            roller = new FileRoller(output, rollRecords, rollMs, transactionTopic);
        } catch (IOException e) {
            // The output is unusable (an S3 prefix that cannot be listed: credentials, bucket,
            // endpoint): the message names the location, never a credential.
            System.err.println("writer: " + e.getMessage());
            System.err.flush();
            Runtime.getRuntime().halt(3);
            return;
        }
        new DebeziumJsonlWriter(props, roller).run();
    }

    private final Properties props;
    private final FileRoller roller;
    private final CountDownLatch completed = new CountDownLatch(1);
    private final AtomicBoolean failed = new AtomicBoolean();
    private final AtomicBoolean stopping = new AtomicBoolean();
    private final AtomicReference<DebeziumEngine<ChangeEvent<String, String>>> engineRef =
            new AtomicReference<>();

    private DebeziumJsonlWriter(Properties props, FileRoller roller) {
        this.props = props;
        this.roller = roller;
    }

    private void run() throws InterruptedException {
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(props)
                .using(new DebeziumEngine.ConnectorCallback() {
                    @Override
                    public void taskStarted() {
                        emit("{\"ready\": true}");
                    }
                })
                .using((success, message, error) -> {
                    if (!success) {
                        failed.set(true);
                        System.err.println("writer: the engine failed: " + message);
                        if (error != null) {
                            error.printStackTrace(System.err);
                        }
                        System.err.flush();
                    }
                    completed.countDown();
                })
                .notifying(roller)
                .build();
        engineRef.set(engine);

        ScheduledExecutorService timer =
                Executors.newSingleThreadScheduledExecutor(r -> daemon(r, "roll-timer"));
        long tick = Math.max(5, Math.min(50, roller.rollMs / 5));
        timer.scheduleWithFixedDelay(roller::rollIfDue, tick, tick, TimeUnit.MILLISECONDS);

        Runtime.getRuntime().addShutdownHook(new Thread(this::shutdown, "writer-shutdown"));

        ExecutorService executor =
                Executors.newSingleThreadExecutor(r -> daemon(r, "debezium-engine"));
        executor.execute(engine);
        completed.await();
        if (stopping.get()) {
            // SIGTERM: the shutdown hook drives the rest and halts the JVM.
            Thread.sleep(Long.MAX_VALUE);
        }
        if (failed.get()) {
            System.err.flush();
            Runtime.getRuntime().halt(3);
        }
        // The engine completed on its own (e.g. snapshot.mode initial_only): publish what is left
        // (its offsets can no longer be committed: a restart repeats it, at-least-once).
        try {
            roller.publishUnmarked();
        } catch (IOException | InterruptedException e) {
            System.err.println("writer: could not publish the last file: " + e);
            Runtime.getRuntime().halt(3);
        }
        OUT.flush();
        System.err.flush();
        Runtime.getRuntime().halt(0);
    }

    /** SIGTERM: publish the in-progress file, close the engine (offsets flushed), exit 0. */
    private void shutdown() {
        if (completed.getCount() == 0 || !stopping.compareAndSet(false, true)) {
            return; // the engine already stopped by itself: run() decides the exit code
        }
        roller.closing = true;
        int code = 0;
        try {
            roller.publishNow();
        } catch (Exception e) {
            System.err.println("writer: could not publish the in-progress file: " + e);
            code = 3;
        }
        DebeziumEngine<ChangeEvent<String, String>> engine = engineRef.get();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (engine != null) {
            try {
                engine.close();
                break;
            } catch (IllegalStateException e) {
                // Tasks still starting (close refused until they run), or already stopping.
                String message = String.valueOf(e.getMessage());
                if (!message.contains("starting") || System.nanoTime() > deadline) {
                    break;
                }
                sleep(100);
            } catch (Exception e) {
                System.err.println("writer: closing the engine failed: " + e);
                code = 3;
                break;
            }
        }
        try {
            if (!completed.await(60, TimeUnit.SECONDS)) {
                System.err.println("writer: the engine did not stop within 60 s");
                code = 3;
            }
            // Normally empty; a batch cut short by the close is published without its offsets
            // (it will be repeated after a restart: at-least-once).
            roller.publishUnmarked();
        } catch (Exception e) {
            System.err.println("writer: shutdown: " + e);
            code = 3;
        }
        if (failed.get()) {
            code = 3;
        }
        OUT.flush();
        System.err.flush();
        Runtime.getRuntime().halt(code);
    }

    /**
     * Writes batches into rolling files; marks records processed once their file is published,
     * up to the last transaction boundary only.
     *
     * <p>A record is a <em>boundary</em> if it is a transaction {@code END}, or if it arrives
     * outside any {@code BEGIN}..{@code END} (snapshot rows, schema changes, heartbeats, any
     * record when {@code provide.transaction.metadata} is off), or if it is the last record before
     * a {@code BEGIN} that arrives while a transaction is still open (which can only mean that
     * one ended without an {@code END}: Debezium 3.5.0's MariaDB connector opens a transaction for
     * a DDL's standalone GTID event and never closes it). Once a file is published, every
     * published record up to and including the last boundary is marked processed, in order, then
     * the batch is marked finished; published records after it (an open transaction's) wait for
     * a later publish that brings their {@code END}. So the flushed offset is always a
     * transaction's end or a record outside transactions, and a restart repeats an interrupted
     * transaction whole instead of resuming inside it (debezium/dbz#1554, README.md).
     */
    static final class FileRoller implements DebeziumEngine.ChangeConsumer<ChangeEvent<String, String>> {
        final Output output;
        final int rollRecords;
        final long rollMs;
        final String transactionTopic;
        volatile boolean closing;

        private static final ObjectMapper JSON = new ObjectMapper();

        private final ReentrantLock lock = new ReentrantLock();
        /** Records in the in-progress file. */
        private final List<ChangeEvent<String, String>> pending = new ArrayList<>();
        /** Whether each of {@link #pending} is a boundary. */
        private final List<Boolean> pendingBoundary = new ArrayList<>();
        /** Published records not marked yet (an open transaction's), oldest first. */
        private final List<ChangeEvent<String, String>> unmarked = new ArrayList<>();
        private final List<Boolean> unmarkedBoundary = new ArrayList<>();
        /** Between a BEGIN and its END, as appended. */
        private boolean inTransaction;
        private DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer;
        private long sequence;
        private Path inProgress;
        private FileOutputStream stream;
        private BufferedWriter writer;
        private long firstRecordNanos;

        FileRoller(Output output, int rollRecords, long rollMs, String transactionTopic) throws IOException {
            this.output = output;
            this.rollRecords = rollRecords;
            this.rollMs = rollMs;
            this.transactionTopic = transactionTopic;
            this.sequence = output.highestSequence() + 1;
        }

        @Override
        public void handleBatch(List<ChangeEvent<String, String>> records,
                DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer)
                throws InterruptedException {
            lock.lock();
            try {
                this.committer = committer;
                for (ChangeEvent<String, String> record : records) {
                    append(record);
                    if (pending.size() >= rollRecords || due()) {
                        publish(true);
                    }
                }
                if (closing) {
                    publish(true);
                }
                committer.markBatchFinished();
            } catch (IOException e) {
                throw new RuntimeException("writing " + inProgress + " failed", e);
            } finally {
                lock.unlock();
            }
        }

        /** The timer's check: publish the in-progress file once it is old enough. */
        void rollIfDue() {
            lock.lock();
            try {
                if (due()) {
                    publish(true);
                    committer.markBatchFinished();
                }
            } catch (Exception e) {
                System.err.println("writer: publishing " + inProgress + " failed: " + e);
                e.printStackTrace(System.err);
                System.err.flush();
                Runtime.getRuntime().halt(3);
            } finally {
                lock.unlock();
            }
        }

        void publishNow() throws IOException, InterruptedException {
            lock.lock();
            try {
                if (!pending.isEmpty()) {
                    publish(true);
                    committer.markBatchFinished();
                }
            } finally {
                lock.unlock();
            }
        }

        void publishUnmarked() throws IOException, InterruptedException {
            lock.lock();
            try {
                publish(false);
            } finally {
                lock.unlock();
            }
        }

        private boolean due() {
            return !pending.isEmpty()
                    && System.nanoTime() - firstRecordNanos >= TimeUnit.MILLISECONDS.toNanos(rollMs);
        }

        private void append(ChangeEvent<String, String> record) throws IOException {
            if (writer == null) {
                inProgress = output.spool(finalName(sequence));
                stream = new FileOutputStream(inProgress.toFile());
                writer = new BufferedWriter(new OutputStreamWriter(stream, StandardCharsets.UTF_8), 1 << 16);
                firstRecordNanos = System.nanoTime();
            }
            String value = record.value();
            writer.write(value == null ? "null" : value);
            writer.write('\n');
            pending.add(record);
            pendingBoundary.add(boundary(record));
        }

        /** Whether {@code record} closes a transaction or stands outside one; tracks BEGIN/END. */
        private boolean boundary(ChangeEvent<String, String> record) {
            if (transactionTopic.equals(record.destination()) && record.value() != null) {
                String status = transactionStatus(record.value());
                if ("BEGIN".equals(status)) {
                    if (inTransaction) {
                        // The open transaction never got its END, yet it is over: the stream is
                        // in commit order. Debezium 3.5.0's MariaDB connector opens one for every
                        // GTID event, also a DDL's standalone one, which no commit closes: its
                        // last record (the schema change) is a boundary after all.
                        closeOpenTransaction();
                    }
                    inTransaction = true;
                    return false;
                }
                if ("END".equals(status)) {
                    inTransaction = false;
                    return true;
                }
            }
            return !inTransaction;
        }

        /** Makes the last record appended so far a boundary. */
        private void closeOpenTransaction() {
            List<Boolean> flags = pendingBoundary.isEmpty() ? unmarkedBoundary : pendingBoundary;
            if (!flags.isEmpty()) {
                flags.set(flags.size() - 1, Boolean.TRUE);
            }
        }

        /** A transaction record's {@code status}, with or without JsonConverter's envelope. */
        private static String transactionStatus(String value) {
            try {
                JsonNode node = JSON.readTree(value);
                JsonNode payload = node.has("payload") && node.has("schema") ? node.get("payload") : node;
                JsonNode status = payload == null ? null : payload.get("status");
                return status == null ? null : status.asText();
            } catch (IOException e) {
                throw new IllegalStateException("unreadable transaction record: " + value, e);
            }
        }

        private void publish(boolean mark) throws IOException, InterruptedException {
            if (pending.isEmpty()) {
                return;
            }
            writer.flush();
            output.sync(stream);
            writer.close();
            String name = finalName(sequence);
            // Returns once the file is visible whole under its final name; only then are its
            // records marked processed (below), so offsets never cover an unpublished record.
            output.publish(inProgress, name);
            int count = pending.size();
            emit("{\"file\": \"" + name + "\", \"records\": " + count + "}");
            unmarked.addAll(pending);
            unmarkedBoundary.addAll(pendingBoundary);
            pending.clear();
            pendingBoundary.clear();
            if (mark) {
                int last = unmarkedBoundary.lastIndexOf(Boolean.TRUE);
                for (int i = 0; i <= last; i++) {
                    committer.markProcessed(unmarked.get(i));
                }
                unmarked.subList(0, last + 1).clear();
                unmarkedBoundary.subList(0, last + 1).clear();
            }
            writer = null;
            stream = null;
            inProgress = null;
            sequence++;
        }
    }

    /** Where published files go: a local directory or an S3 prefix. */
    interface Output {
        /** The highest published sequence number (0 if none); deletes leftover in-progress files. */
        long highestSequence() throws IOException;

        /** Where the in-progress file of {@code name} is written. */
        Path spool(String name);

        /** Makes the in-progress file's bytes durable before it is closed, if that matters here. */
        void sync(FileOutputStream stream) throws IOException;

        /** Publishes the closed in-progress file as {@code name}; returns once it is visible whole. */
        void publish(Path spool, String name) throws IOException;
    }

    /** A local directory: fsync, atomic rename, directory fsync. */
    static final class LocalOutput implements Output {
        private final Path dir;

        LocalOutput(Path dir) {
            this.dir = dir;
        }

        @Override
        public long highestSequence() throws IOException {
            long highest = 0;
            try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir)) {
                for (Path entry : entries) {
                    String name = entry.getFileName().toString();
                    Matcher m = FINAL_NAME.matcher(name);
                    if (m.matches()) {
                        highest = Math.max(highest, Long.parseLong(m.group(1)));
                    } else if (name.startsWith(".") && name.endsWith(".inprogress")) {
                        // A crashed sink's unpublished file: lost, as with an object store.
                        Files.delete(entry);
                        System.err.println("writer: deleted the leftover " + name);
                    }
                }
            }
            return highest;
        }

        @Override
        public Path spool(String name) {
            return dir.resolve("." + name + ".inprogress");
        }

        @Override
        public void sync(FileOutputStream stream) throws IOException {
            stream.getFD().sync();
        }

        @Override
        public void publish(Path spool, String name) throws IOException {
            Files.move(spool, dir.resolve(name), StandardCopyOption.ATOMIC_MOVE);
            syncDirectory();
        }

        private void syncDirectory() throws IOException {
            try (FileChannel channel = FileChannel.open(dir, StandardOpenOption.READ)) {
                channel.force(true);
            } catch (ClosedByInterruptException e) {
                // The engine interrupts its polling thread on close: the rename is done either way.
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * An S3 prefix (AWS S3 or an S3-compatible store): the in-progress file is spooled in a local
     * directory and published as one {@code PutObject} of the whole file under its final key. An
     * object is visible whole or not at all, so a lister never sees part of a file; keys are the
     * zero-padded sequence, so their order (ListObjectsV2 lists in UTF-8 binary order) is write
     * order. With {@code If-None-Match: *} a published key is never replaced: a second writer on
     * the same prefix fails instead of overwriting what a reader may already have read.
     */
    static final class S3Output implements Output {
        private static final int ATTEMPTS = 3;

        private final S3Client client;
        private final String bucket;
        private final String prefix;
        private final boolean conditionalPut;
        private final Path spoolDir;

        private S3Output(S3Client client, String bucket, String prefix, boolean conditionalPut, Path spoolDir) {
            this.client = client;
            this.bucket = bucket;
            this.prefix = prefix;
            this.conditionalPut = conditionalPut;
            this.spoolDir = spoolDir;
        }

        /** Parses {@code s3://bucket/prefix} (or {@code s3a://}) and builds the client. */
        static S3Output open(String url, String endpoint, boolean pathStyle, boolean conditionalPut, Path spoolDir) {
            String rest = url.substring(url.indexOf("://") + 3);
            int slash = rest.indexOf('/');
            String bucket = slash < 0 ? rest : rest.substring(0, slash);
            String prefix = slash < 0 ? "" : rest.substring(slash + 1);
            if (bucket.isEmpty()) {
                usage("--out " + url + " names no bucket (s3://BUCKET/PREFIX)");
            }
            if (!prefix.isEmpty() && !prefix.endsWith("/")) {
                prefix += "/";
            }
            if (endpoint == null || endpoint.isEmpty()) {
                endpoint = firstSet(System.getenv("AWS_ENDPOINT_URL_S3"), System.getenv("AWS_ENDPOINT_URL"));
            }
            S3ClientBuilder builder = S3Client.builder()
                    // The JDK's HttpURLConnection: the SDK's default clients (Apache, Netty) would
                    // add about 6 MB to the jar for nothing a sequence of PutObjects needs.
                    .httpClientBuilder(UrlConnectionHttpClient.builder()
                            .connectionTimeout(Duration.ofSeconds(10))
                            .socketTimeout(Duration.ofSeconds(60)))
                    .forcePathStyle(pathStyle);
            if (endpoint != null) {
                try {
                    builder.endpointOverride(URI.create(endpoint));
                } catch (IllegalArgumentException e) {
                    usage("the S3 endpoint is not a URL: " + endpoint);
                }
            }
            S3Client client = null;
            try {
                client = builder.build();
            } catch (SdkException e) {
                // Typically no region: the SDK names the places it looked.
                usage("cannot build the S3 client (set AWS_REGION?): " + e.getMessage());
            }
            try {
                Files.createDirectories(spoolDir);
            } catch (IOException e) {
                usage("cannot create the spool directory " + spoolDir + ": " + e);
            }
            return new S3Output(client, bucket, prefix, conditionalPut, spoolDir);
        }

        private String where(String key) {
            return "s3://" + bucket + "/" + key;
        }

        @Override
        public long highestSequence() throws IOException {
            try (DirectoryStream<Path> entries = Files.newDirectoryStream(spoolDir)) {
                for (Path entry : entries) {
                    String name = entry.getFileName().toString();
                    if (IN_PROGRESS_NAME.matcher(name).matches()) {
                        // Never uploaded: its records were not marked, Debezium repeats them.
                        Files.delete(entry);
                        System.err.println("writer: deleted the leftover " + entry);
                    }
                }
            }
            long highest = 0;
            String token = null;
            try {
                do {
                    ListObjectsV2Response page = client.listObjectsV2(ListObjectsV2Request.builder()
                            .bucket(bucket).prefix(prefix).delimiter("/").continuationToken(token).build());
                    for (S3Object object : page.contents()) {
                        Matcher m = FINAL_NAME.matcher(object.key().substring(prefix.length()));
                        if (m.matches()) {
                            highest = Math.max(highest, Long.parseLong(m.group(1)));
                        }
                    }
                    token = Boolean.TRUE.equals(page.isTruncated()) ? page.nextContinuationToken() : null;
                } while (token != null);
            } catch (SdkException e) {
                throw new IOException("cannot list " + where(prefix) + ": " + e.getMessage(), e);
            }
            return highest;
        }

        @Override
        public Path spool(String name) {
            return spoolDir.resolve("." + name + ".inprogress");
        }

        @Override
        public void sync(FileOutputStream stream) {
            // Nothing: the spool file only matters until its upload returns, and a crash before
            // that loses it anyway (its records are not marked, so Debezium repeats them).
        }

        @Override
        public void publish(Path spool, String name) throws IOException {
            String key = prefix + name;
            PutObjectRequest.Builder request = PutObjectRequest.builder()
                    .bucket(bucket).key(key).contentType("application/x-ndjson");
            if (conditionalPut) {
                request.ifNoneMatch("*");
            }
            // The engine interrupts its polling thread when it closes: the upload must not be
            // abandoned half-way for that (a retried PutObject of the same bytes is harmless).
            boolean interrupted = Thread.interrupted();
            try {
                for (int attempt = 1; ; attempt++) {
                    try {
                        client.putObject(request.build(), RequestBody.fromFile(spool));
                        break;
                    } catch (S3Exception e) {
                        if (e.statusCode() == 412 || e.statusCode() == 409) {
                            // The key exists: our own earlier attempt (a retry after a lost
                            // answer) or another writer. Only the same bytes are ours.
                            if (sameContent(key, spool)) {
                                break;
                            }
                            throw new IOException(where(key) + " already exists with other content: "
                                    + "another writer publishes under " + where(prefix)
                                    + " (one writer per prefix)", e);
                        }
                        throw new IOException("uploading " + where(key) + " failed: " + e.getMessage(), e);
                    } catch (AbortedException e) {
                        interrupted |= Thread.interrupted();
                        if (attempt >= ATTEMPTS) {
                            throw new IOException("uploading " + where(key) + " was interrupted", e);
                        }
                    } catch (SdkException | UncheckedIOException e) {
                        throw new IOException("uploading " + where(key) + " failed: " + e.getMessage(), e);
                    }
                }
            } finally {
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
            }
            Files.delete(spool);
        }

        private boolean sameContent(String key, Path spool) throws IOException {
            try {
                byte[] stored = client.getObjectAsBytes(GetObjectRequest.builder().bucket(bucket).key(key).build())
                        .asByteArray();
                return Arrays.equals(stored, Files.readAllBytes(spool));
            } catch (SdkException e) {
                throw new IOException("reading " + where(key) + " back failed: " + e.getMessage(), e);
            }
        }
    }

    private static String firstSet(String... values) {
        for (String value : values) {
            if (value != null && !value.isEmpty()) {
                return value;
            }
        }
        return null;
    }

    /** Fails with a usage error if this jar was not built with {@code className}'s connector. */
    private static void requireConnector(String className, String connector) {
        try {
            Class.forName(className, false, DebeziumJsonlWriter.class.getClassLoader());
        } catch (ClassNotFoundException e) {
            usage("this jar has no " + className + " for --connector " + connector + " ("
                    + (connector.equals("mariadb")
                            ? "use target/debezium-jsonl-writer-mariadb.jar, built with -Pmariadb"
                            : "use target/debezium-writer.jar, the default build")
                    + ")");
        }
    }

    private static String finalName(long sequence) {
        return String.format(Locale.ROOT, "%010d.jsonl", sequence);
    }

    private static synchronized void emit(String line) {
        OUT.println(line);
        OUT.flush();
    }

    private static Thread daemon(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static boolean bool(Map<String, String> args, String key, boolean fallback) {
        String value = args.get(key);
        if (value == null) {
            return fallback;
        }
        if (!value.equals("true") && !value.equals("false")) {
            usage("--" + key + " wants true or false, got: " + value);
        }
        return Boolean.parseBoolean(value);
    }

    private static int positive(Map<String, String> args, String key, int fallback) {
        String value = args.get(key);
        if (value == null) {
            return fallback;
        }
        try {
            int n = Integer.parseInt(value);
            if (n > 0) {
                return n;
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        usage("--" + key + " wants a positive integer, got: " + value);
        return fallback;
    }

    private static void usage(String message) {
        System.err.println("writer: " + message);
        System.err.println(USAGE);
        System.exit(64);
    }
}
