package ai.ondevice.core;

/**
 * Text -> (float embedding, packed code). Implemented by {@link JavaEncoder} (pure Java, this module) and, in
 * the Android app, by an ONNX Runtime encoder running the bundle's encoder.onnx.
 */
public interface Encoder extends AutoCloseable {
    /** The result of encoding one text. */
    final class Encoding {
        public final int[] ids;
        public final float[] embedding;
        public final byte[] code;

        public Encoding(int[] ids, float[] embedding, byte[] code) {
            this.ids = ids;
            this.embedding = embedding;
            this.code = code;
        }
    }

    Encoding encode(String text);

    /** A short name for the UI and logs ("java", "onnx"). */
    String name();

    @Override
    default void close() {
    }
}
