package ai.ondevice.core;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;

/**
 * Where a bundle's files come from: a directory on disk here, the app's assets on Android
 * (see the app's {@code AssetSource}). Names are the bundle-relative paths of the manifest, '/'-separated.
 */
public interface FileSource {
    /** Opens {@code name}; throws {@link java.io.FileNotFoundException} when it does not exist. */
    InputStream open(String name) throws IOException;

    /** A human-readable location for error messages. */
    String describe();

    /** Reads a whole stream (Java 8 / Android API 24 have no InputStream.readAllBytes). */
    static byte[] readAll(InputStream in) throws IOException {
        try {
            ByteArrayOutputStream out = new ByteArrayOutputStream(Math.max(32, in.available()));
            byte[] buf = new byte[1 << 16];
            int n;
            while ((n = in.read(buf)) > 0) {
                out.write(buf, 0, n);
            }
            return out.toByteArray();
        } finally {
            in.close();
        }
    }

    /** A bundle directory on disk. */
    static FileSource directory(final File dir) {
        return new FileSource() {
            @Override
            public InputStream open(String name) throws IOException {
                return new FileInputStream(new File(dir, name));
            }

            @Override
            public String describe() {
                return dir.getPath();
            }
        };
    }
}
