package ai.ondevice.core;

import java.util.Map;

/**
 * The student's forward pass in plain Java, reading the bundle's fp32 weights (student.safetensors):
 * embedding -> one-layer bidirectional LSTM over the valid tokens -> pooling -> proj (no bias) -> tanh.
 *
 * <p>It follows PyTorch's LSTM exactly (gate order i, f, g, o):
 * {@code gates = W_ih x + b_ih + W_hh h + b_hh; i, f, o = sigmoid; g = tanh; c = f*c + i*g; h = o*tanh(c)}.
 * The backward direction reads the sequence right to left, so its final state is at position 0.
 * Pooling: "mean" and "max" over valid positions of [h_fwd, h_bwd]; "last" = [final h_fwd, final h_bwd];
 * "meanmax" = [mean, max]. Instances are immutable and thread-safe.
 */
public final class Student {
    public static final String[] POOLINGS = {"mean", "max", "last", "meanmax"};

    /** The architecture fields of the manifest's "student" section that the forward pass needs. */
    public static final class Config {
        public final int vocabSize;
        public final int embeddingDim;
        public final int hiddenSize;
        public final String pooling;
        public final int outputDim;

        public Config(int vocabSize, int embeddingDim, int hiddenSize, String pooling, int outputDim) {
            boolean known = false;
            for (String p : POOLINGS) {
                known |= p.equals(pooling);
            }
            if (!known) {
                throw new BundleException("unknown student pooling \"" + pooling + "\"; this core knows mean, max, last, meanmax");
            }
            if (vocabSize < 2 || embeddingDim < 1 || hiddenSize < 1 || outputDim < 1) {
                throw new BundleException("student config has non-positive sizes");
            }
            this.vocabSize = vocabSize;
            this.embeddingDim = embeddingDim;
            this.hiddenSize = hiddenSize;
            this.pooling = pooling;
            this.outputDim = outputDim;
        }

        public static Config fromJson(Map<String, Object> m) {
            String what = "manifest student";
            return new Config((int) Json.getLong(m, "vocab_size", what), (int) Json.getLong(m, "embedding_dim", what),
                    (int) Json.getLong(m, "hidden_size", what), Json.getString(m, "pooling", what),
                    (int) Json.getLong(m, "output_dim", what));
        }

        public int pooledDim() {
            return ("meanmax".equals(pooling) ? 4 : 2) * hiddenSize;
        }
    }

    /** One LSTM direction, weights transposed so that each step is a run of vectorizable axpy loops. */
    private static final class Direction {
        final float[] wihT; // [E][4H]
        final float[] whhT; // [H][4H]
        final float[] bias; // b_ih + b_hh, [4H]

        Direction(float[] wih, float[] whh, float[] bih, float[] bhh, int e, int h) {
            int g = 4 * h;
            wihT = transpose(wih, g, e);
            whhT = transpose(whh, g, h);
            bias = new float[g];
            for (int r = 0; r < g; r++) {
                bias[r] = bih[r] + bhh[r];
            }
        }
    }

    private final Config config;
    private final float[] embedding; // [V][E]
    private final Direction fwd;
    private final Direction bwd;
    private final float[] projT; // [pooled][out]

    /** Reads the weights from student.safetensors (keys of the PyTorch state dict), checking every shape. */
    public Student(Config config, SafeTensors weights) {
        this(config, tensors(config, weights));
    }

    /**
     * Builds the student from flat row-major float arrays keyed like the PyTorch state dict:
     * embedding.weight [V, E], lstm.{weight_ih,weight_hh,bias_ih,bias_hh}_l0[_reverse], proj.weight [out, pooled].
     */
    public Student(Config config, Map<String, float[]> w) {
        this.config = config;
        int v = config.vocabSize;
        int e = config.embeddingDim;
        int h = config.hiddenSize;
        this.embedding = take(w, "embedding.weight", (long) v * e);
        this.fwd = direction(w, "", e, h);
        this.bwd = direction(w, "_reverse", e, h);
        float[] proj = take(w, "proj.weight", (long) config.outputDim * config.pooledDim());
        this.projT = transpose(proj, config.outputDim, config.pooledDim());
    }

    /** The tensor names the forward pass reads, with their shapes for {@code config}. */
    public static Map<String, int[]> shapes(Config config) {
        int e = config.embeddingDim;
        int h = config.hiddenSize;
        Map<String, int[]> out = new java.util.LinkedHashMap<String, int[]>();
        out.put("embedding.weight", new int[] {config.vocabSize, e});
        for (String suffix : new String[] {"", "_reverse"}) {
            out.put("lstm.weight_ih_l0" + suffix, new int[] {4 * h, e});
            out.put("lstm.weight_hh_l0" + suffix, new int[] {4 * h, h});
            out.put("lstm.bias_ih_l0" + suffix, new int[] {4 * h});
            out.put("lstm.bias_hh_l0" + suffix, new int[] {4 * h});
        }
        out.put("proj.weight", new int[] {config.outputDim, config.pooledDim()});
        return out;
    }

    private static Map<String, float[]> tensors(Config config, SafeTensors st) {
        String what = "student.safetensors";
        Map<String, float[]> out = new java.util.HashMap<String, float[]>();
        for (Map.Entry<String, int[]> e : shapes(config).entrySet()) {
            out.put(e.getKey(), st.get(e.getKey(), what).requireShape(what, e.getValue()).floats());
        }
        return out;
    }

    private static float[] take(Map<String, float[]> w, String name, long size) {
        float[] a = w.get(name);
        if (a == null || a.length != size) {
            throw new BundleException("student weights: " + name + (a == null ? " is missing" : " has " + a.length
                    + " values, the config needs " + size));
        }
        return a;
    }

    private static Direction direction(Map<String, float[]> w, String suffix, int e, int h) {
        return new Direction(take(w, "lstm.weight_ih_l0" + suffix, 4L * h * e), take(w, "lstm.weight_hh_l0" + suffix, 4L * h * h),
                take(w, "lstm.bias_ih_l0" + suffix, 4L * h), take(w, "lstm.bias_hh_l0" + suffix, 4L * h), e, h);
    }

    private static float[] transpose(float[] m, int rows, int cols) {
        float[] t = new float[m.length];
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < cols; c++) {
                t[c * rows + r] = m[r * cols + c];
            }
        }
        return t;
    }

    public Config config() {
        return config;
    }

    public int dim() {
        return config.outputDim;
    }

    /** The sentence vector (length {@code outputDim}, in (-1, 1)) of one id sequence (at least one id). */
    public float[] forward(int[] ids) {
        int t = ids.length;
        if (t == 0) {
            throw new IllegalArgumentException("a sentence has at least one id (the tokenizer gives [UNK] for empty text)");
        }
        int h = config.hiddenSize;
        int e = config.embeddingDim;
        for (int id : ids) {
            if (id < 0 || id >= config.vocabSize) {
                throw new IllegalArgumentException("token id " + id + " is outside the vocabulary of " + config.vocabSize);
            }
        }
        float[] outF = new float[t * h]; // forward hidden states per position
        float[] outB = new float[t * h]; // backward hidden states per position
        float[] gates = new float[4 * h];
        float[] hState = new float[h];
        float[] cState = new float[h];
        run(fwd, ids, 0, t, 1, outF, gates, hState, cState, e, h);
        run(bwd, ids, t - 1, -1, -1, outB, gates, hState, cState, e, h);

        float[] pooled = new float[config.pooledDim()];
        String p = config.pooling;
        if ("last".equals(p)) {
            System.arraycopy(outF, (t - 1) * h, pooled, 0, h);
            System.arraycopy(outB, 0, pooled, h, h);
        } else {
            boolean mean = "mean".equals(p) || "meanmax".equals(p);
            boolean max = "max".equals(p) || "meanmax".equals(p);
            int maxOff = mean ? 2 * h : 0;
            if (max) {
                for (int j = 0; j < 2 * h; j++) {
                    pooled[maxOff + j] = Float.NEGATIVE_INFINITY;
                }
            }
            for (int s = 0; s < t; s++) {
                for (int j = 0; j < h; j++) {
                    float a = outF[s * h + j];
                    float b = outB[s * h + j];
                    if (mean) {
                        pooled[j] += a;
                        pooled[h + j] += b;
                    }
                    if (max) {
                        pooled[maxOff + j] = Math.max(pooled[maxOff + j], a);
                        pooled[maxOff + h + j] = Math.max(pooled[maxOff + h + j], b);
                    }
                }
            }
            if (mean) {
                for (int j = 0; j < 2 * h; j++) {
                    pooled[j] /= t;
                }
            }
        }
        int out = config.outputDim;
        float[] y = new float[out];
        for (int k = 0; k < pooled.length; k++) {
            float pk = pooled[k];
            int base = k * out;
            for (int j = 0; j < out; j++) {
                y[j] += projT[base + j] * pk;
            }
        }
        for (int j = 0; j < out; j++) {
            y[j] = (float) Math.tanh(y[j]);
        }
        return y;
    }

    private void run(Direction d, int[] ids, int start, int end, int step, float[] out, float[] gates,
                     float[] hState, float[] cState, int e, int h) {
        int g4 = 4 * h;
        java.util.Arrays.fill(hState, 0f);
        java.util.Arrays.fill(cState, 0f);
        for (int s = start; s != end; s += step) {
            System.arraycopy(d.bias, 0, gates, 0, g4);
            int emb = ids[s] * e;
            for (int k = 0; k < e; k++) {
                float x = embedding[emb + k];
                int base = k * g4;
                for (int r = 0; r < g4; r++) {
                    gates[r] += d.wihT[base + r] * x;
                }
            }
            if (s != start) { // h is zero at the first step
                for (int k = 0; k < h; k++) {
                    float x = hState[k];
                    int base = k * g4;
                    for (int r = 0; r < g4; r++) {
                        gates[r] += d.whhT[base + r] * x;
                    }
                }
            }
            int o = s * h;
            for (int j = 0; j < h; j++) {
                float i = sigmoid(gates[j]);
                float f = sigmoid(gates[h + j]);
                float g = (float) Math.tanh(gates[2 * h + j]);
                float og = sigmoid(gates[3 * h + j]);
                float c = f * cState[j] + i * g;
                cState[j] = c;
                float hv = og * (float) Math.tanh(c);
                hState[j] = hv;
                out[o + j] = hv;
            }
        }
    }

    private static float sigmoid(float x) {
        return (float) (1.0 / (1.0 + Math.exp(-x)));
    }
}
