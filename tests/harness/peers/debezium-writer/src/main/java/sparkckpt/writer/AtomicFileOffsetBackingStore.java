package sparkckpt.writer;

import io.debezium.embedded.KafkaConnectUtil;

import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.runtime.WorkerConfig;
import org.apache.kafka.connect.runtime.standalone.StandaloneConfig;
import org.apache.kafka.connect.storage.FileOffsetBackingStore;

import java.io.IOException;
import java.lang.reflect.Field;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Kafka Connect's file offset store, with every save atomic: written to a staging file, then
 * renamed over the offsets file.
 *
 * <p>{@link FileOffsetBackingStore#save()} (Kafka 4.1 and 4.3) truncates the offsets file and
 * writes it in place ({@code Files.newOutputStream(file)}), and {@code load()} treats a truncated
 * file as no offsets at all ({@code EOFException} ignored). A SIGKILL that lands during a save
 * therefore loses every offset, and Debezium takes its initial snapshot again on restart: the
 * connector then refuses the log with {@code RepeatedSnapshotError}, as it must. The tests kill
 * the writer to provoke the ordinary at-least-once repeats (a restart from the last flushed
 * offset), not that loss, so the writer saves atomically. The rest is Kafka's own class: the
 * same serialization, the same load, offsets flushed at the same moments.
 *
 * <p>The base class keeps the file it reads and writes in a private field; it is pointed at the
 * staging file after {@link #configure}, and {@link #start} copies the offsets file there first
 * so the base class loads it.
 */
public final class AtomicFileOffsetBackingStore extends FileOffsetBackingStore {
    private Path target;
    private Path staging;

    /** The no-argument constructor Debezium's engine instantiates an offset store class with. */
    public AtomicFileOffsetBackingStore() {
        super(KafkaConnectUtil.converterForOffsetStore());
    }

    @Override
    public void configure(WorkerConfig config) {
        super.configure(config);
        target = Path.of(config.getString(StandaloneConfig.OFFSET_STORAGE_FILE_FILENAME_CONFIG));
        staging = target.resolveSibling(target.getFileName() + ".saving");
        try {
            Field file = FileOffsetBackingStore.class.getDeclaredField("file");
            file.setAccessible(true);
            file.set(this, staging.toFile());
        } catch (ReflectiveOperationException e) {
            throw new ConnectException("cannot redirect FileOffsetBackingStore's file", e);
        }
    }

    @Override
    public synchronized void start() {
        try {
            if (Files.exists(target)) {
                Files.copy(target, staging, StandardCopyOption.REPLACE_EXISTING);
            } else {
                Files.deleteIfExists(staging);
            }
        } catch (IOException e) {
            throw new ConnectException("cannot stage the offsets file " + target, e);
        }
        super.start();
    }

    @Override
    protected void save() {
        super.save();
        try {
            Files.move(staging, target, StandardCopyOption.ATOMIC_MOVE,
                    StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            throw new ConnectException("cannot publish the offsets file " + target, e);
        }
    }
}
