package ai.ondevice.core;

/**
 * Embedding -> packed code: bit b is set when {@code sum_j embedding[j] * projection[j][b] + offset[b] > 0};
 * bits are packed in the "little" order of {@link Codes}. Weights come from binarizer.safetensors
 * ("projection" float32 or float16 [dim, bits], "offset" float32 [bits]; a float16 projection is widened exactly and
 * used in float arithmetic, like the graph's Cast does).
 */
public final class Binarizer {
    private final int dim;
    private final int bits;
    private final float[] projection; // [dim][bits]
    private final float[] offset;

    public Binarizer(int dim, int bits, float[] projection, float[] offset) {
        if (projection.length != dim * bits || offset.length != bits) {
            throw new BundleException("binarizer weights do not match dim " + dim + " x bits " + bits);
        }
        this.dim = dim;
        this.bits = bits;
        this.projection = projection;
        this.offset = offset;
    }

    public static Binarizer fromSafeTensors(SafeTensors st, int dim, int bits) {
        String what = "binarizer.safetensors";
        return new Binarizer(dim, bits, st.get("projection", what).requireShape(what, dim, bits).floats(),
                st.get("offset", what).requireShape(what, bits).floats());
    }

    public int dim() {
        return dim;
    }

    public int bits() {
        return bits;
    }

    public int codeBytes() {
        return Codes.codeBytes(bits);
    }

    /** The pre-threshold scores, {@code embedding @ projection + offset}. */
    public float[] scores(float[] embedding) {
        if (embedding.length != dim) {
            throw new IllegalArgumentException("embedding has " + embedding.length + " values, binarizer expects " + dim);
        }
        float[] z = offset.clone();
        for (int j = 0; j < dim; j++) {
            float x = embedding[j];
            int base = j * bits;
            for (int b = 0; b < bits; b++) {
                z[b] += projection[base + b] * x;
            }
        }
        return z;
    }

    /** The packed code of one embedding. */
    public byte[] code(float[] embedding) {
        float[] z = scores(embedding);
        byte[] out = new byte[codeBytes()];
        for (int b = 0; b < bits; b++) {
            if (z[b] > 0f) {
                out[b >>> 3] |= (byte) (1 << (b & 7));
            }
        }
        return out;
    }
}
