package ai.ondevice.core;

import java.util.Map;

/**
 * The bundle's optional DiPair head ({@code ondevice pairs dipair-export}): a small post-LN transformer over the
 * cached token states of two sentences (N slots of side a, M of side b, D wide; all-zero rows are padding and are
 * masked out of attention), read from the fp32 {@code dipair_head.safetensors} that the manifest's {@code dipair}
 * block names (size and SHA-256 verified on read). The same maths as {@code ondevice.pairs.dipair.head_forward_numpy};
 * sums run in double. Token states come from the encoder graph ({@code token_states_a/b} outputs); this class does
 * not compute them. A head with a pooled slot ({@code vec_dim > 0}) reads slot 0 of each side as the projected sentence
 * vector and prepends a comparison slot {@code C [pa, pb, pa * pb, |pa - pb|] + c} (never masked) whose output gives
 * the logits.
 */
public final class DiPairHead {
    public final int n;
    public final int m;
    public final int d;
    public final int layers;
    public final int heads;
    public final int ffn;
    public final int outputs;
    /** Whether slot 0 of each side is the pooled sentence vector (and the head has a comparison slot). */
    public final boolean pooled;
    /** "regression", "binary" or "classes". */
    public final String kind;
    /** The head + Hamming blend the bundle ranks by ({@link PairBlend#keyOfDistance}), or null when the manifest has none. */
    public final PairBlend blend;
    private final float[] embedAdd; // [slots][d]: position + segment embedding
    private final float[] compareW; // [d][4 d] (pooled heads only)
    private final float[] compareB;
    private final float[][][] w; // per layer: q.w, q.b, k.w, k.b, v.w, v.b, o.w, o.b, ln1.g, ln1.b, ff1.w, ff1.b, ff2.w, ff2.b, ln2.g, ln2.b
    private final float[] outW;
    private final float[] outB;
    private final TaskOutput task;
    private static final double MASK_NEG = -1e4;
    private static final double LN_EPS = 1e-5;
    private static final String[] NAMES = {"q.weight", "q.bias", "k.weight", "k.bias", "v.weight", "v.bias", "o.weight",
        "o.bias", "ln1.weight", "ln1.bias", "ff1.weight", "ff1.bias", "ff2.weight", "ff2.bias", "ln2.weight", "ln2.bias"};

    private DiPairHead(int[] dims, TaskOutput task, float[] embedAdd, float[][][] w, float[] outW, float[] outB, float[][] compare,
                       PairBlend blend) {
        this.n = dims[0];
        this.m = dims[1];
        this.d = dims[2];
        this.layers = dims[3];
        this.heads = dims[4];
        this.ffn = dims[5];
        this.outputs = dims[6];
        this.pooled = compare != null;
        this.compareW = compare == null ? null : compare[0];
        this.compareB = compare == null ? null : compare[1];
        this.kind = task.kind;
        this.task = task;
        this.blend = blend;
        this.embedAdd = embedAdd;
        this.w = w;
        this.outW = outW;
        this.outB = outB;
    }

    /** Loads the DiPair head of {@code bundle}; fails with a BundleException if the bundle has none. */
    public static DiPairHead load(Bundle bundle) {
        Map<String, Object> man = bundle.manifest();
        if (!(man.get("dipair") instanceof Map)) {
            throw new BundleException("bundle " + bundle.describe() + " has no DiPair head; export one with `ondevice pairs dipair-export`");
        }
        Map<String, Object> block = Json.getObject(man, "dipair", "manifest.json");
        Map<String, Object> head = Json.getObject(block, "head", "manifest.json dipair");
        String where = "manifest.json dipair.head";
        int[] dims = {(int) Json.getLong(head, "n", where), (int) Json.getLong(head, "m", where), (int) Json.getLong(head, "d", where),
            (int) Json.getLong(head, "layers", where), (int) Json.getLong(head, "heads", where), (int) Json.getLong(head, "ffn", where),
            (int) Json.getLong(head, "outputs", where)};
        int n = dims[0];
        int m = dims[1];
        int d = dims[2];
        int f = dims[5];
        if (dims[4] < 1 || d % dims[4] != 0) {
            throw new BundleException("manifest.json: DiPair width " + d + " is not divisible by its " + dims[4] + " heads");
        }
        boolean pooled = head.containsKey("vec_dim") && Json.getLong(head, "vec_dim", where) > 0;
        int first = pooled ? 1 : 0;
        int slots = first + n + m;
        String file = Json.getString(block, "weights", "manifest.json dipair");
        SafeTensors st = SafeTensors.parse(bundle.read(file), file);
        float[] pos = st.get("position", file).requireShape(file, slots, d).floats();
        float[] seg = st.get("segment", file).requireShape(file, 2, d).floats();
        float[][] compare = null;
        if (pooled) {
            compare = new float[][] {st.get("compare.weight", file).requireShape(file, d, 4 * d).floats(),
                st.get("compare.bias", file).requireShape(file, d).floats()};
        }
        float[] embedAdd = new float[slots * d];
        for (int s = 0; s < slots; s++) {
            int g = s < first + n ? 0 : 1;
            for (int i = 0; i < d; i++) {
                embedAdd[s * d + i] = pos[s * d + i] + seg[g * d + i];
            }
        }
        float[][][] w = new float[dims[3]][NAMES.length][];
        for (int l = 0; l < dims[3]; l++) {
            for (int k = 0; k < NAMES.length; k++) {
                String name = "layers." + l + "." + NAMES[k];
                SafeTensors.Tensor t = st.get(name, file);
                if (NAMES[k].startsWith("ff1.weight")) {
                    t.requireShape(file, f, d);
                } else if (NAMES[k].startsWith("ff1.bias")) {
                    t.requireShape(file, f);
                } else if (NAMES[k].startsWith("ff2.weight")) {
                    t.requireShape(file, d, f);
                } else if (NAMES[k].endsWith("weight") && !NAMES[k].startsWith("ln")) {
                    t.requireShape(file, d, d);
                } else {
                    t.requireShape(file, d);
                }
                w[l][k] = t.floats();
            }
        }
        int outputs = dims[6];
        float[] outW = st.get("out.weight", file).requireShape(file, outputs, d).floats();
        float[] outB = st.get("out.bias", file).requireShape(file, outputs).floats();
        return new DiPairHead(dims, TaskOutput.of(block, "manifest.json dipair"), embedAdd, w, outW, outB, compare,
            PairBlend.of(block, "dipair", bundle));
    }

    private static double[] linear(double[] x, int rows, int in, float[] wt, float[] b, int out) {
        double[] y = new double[rows * out];
        for (int r = 0; r < rows; r++) {
            for (int o = 0; o < out; o++) {
                double s = b[o];
                int wrow = o * in;
                int xrow = r * in;
                for (int i = 0; i < in; i++) {
                    s += wt[wrow + i] * x[xrow + i];
                }
                y[r * out + o] = s;
            }
        }
        return y;
    }

    private static void layerNorm(double[] x, int rows, int d, float[] g, float[] b) {
        for (int r = 0; r < rows; r++) {
            double mu = 0;
            for (int i = 0; i < d; i++) {
                mu += x[r * d + i];
            }
            mu /= d;
            double var = 0;
            for (int i = 0; i < d; i++) {
                double c = x[r * d + i] - mu;
                var += c * c;
            }
            double inv = 1.0 / Math.sqrt(var / d + LN_EPS);
            for (int i = 0; i < d; i++) {
                x[r * d + i] = (x[r * d + i] - mu) * inv * g[i] + b[i];
            }
        }
    }

    /** Head logits of one pair: states a ({@code n * d}, row-major) and b ({@code m * d}); zero rows are padding. */
    public float[] logits(float[] a, float[] b) {
        if (a.length != n * d || b.length != m * d) {
            throw new IllegalArgumentException("DiPair head takes " + n + "x" + d + " and " + m + "x" + d + " states, got "
                    + a.length + " and " + b.length + " values");
        }
        int first = pooled ? 1 : 0;
        int s = first + n + m;
        double[] x = new double[s * d];
        boolean[] keep = new boolean[s];
        if (pooled) { // comparison slot from the two pooled slots (slot 0 of each side)
            double[] feats = new double[4 * d];
            for (int i = 0; i < d; i++) {
                double pa = a[i];
                double pb = b[i];
                feats[i] = pa;
                feats[d + i] = pb;
                feats[2 * d + i] = pa * pb;
                feats[3 * d + i] = Math.abs(pa - pb);
            }
            double[] c = linear(feats, 1, 4 * d, compareW, compareB, d);
            for (int i = 0; i < d; i++) {
                x[i] = c[i] + embedAdd[i];
            }
            keep[0] = true;
        }
        for (int r = first; r < s; r++) {
            double abs = 0;
            int t = r - first;
            for (int i = 0; i < d; i++) {
                double v = t < n ? a[t * d + i] : b[(t - n) * d + i];
                abs += Math.abs(v);
                x[r * d + i] = v + embedAdd[r * d + i];
            }
            keep[r] = abs > 0;
        }
        int dh = d / heads;
        double scale = 1.0 / Math.sqrt(dh);
        for (int l = 0; l < layers; l++) {
            float[][] p = w[l];
            // only slot 0 reaches the logits: the last layer's queries, outputs and FFN need no other slot
            int rows = l == layers - 1 ? 1 : s;
            double[] k = linear(x, s, d, p[2], p[3], d);
            double[] v = linear(x, s, d, p[4], p[5], d);
            double[] q = linear(x, rows, d, p[0], p[1], d);
            double[] ctx = new double[rows * d];
            double[] att = new double[s];
            for (int h = 0; h < heads; h++) {
                int off = h * dh;
                for (int i = 0; i < rows; i++) {
                    double max = Double.NEGATIVE_INFINITY;
                    for (int j = 0; j < s; j++) {
                        double dot = 0;
                        for (int t = 0; t < dh; t++) {
                            dot += q[i * d + off + t] * k[j * d + off + t];
                        }
                        att[j] = dot * scale + (keep[j] ? 0 : MASK_NEG);
                        max = Math.max(max, att[j]);
                    }
                    double sum = 0;
                    for (int j = 0; j < s; j++) {
                        att[j] = Math.exp(att[j] - max);
                        sum += att[j];
                    }
                    for (int j = 0; j < s; j++) {
                        double pj = att[j] / sum;
                        for (int t = 0; t < dh; t++) {
                            ctx[i * d + off + t] += pj * v[j * d + off + t];
                        }
                    }
                }
            }
            double[] o = linear(ctx, rows, d, p[6], p[7], d);
            for (int i = 0; i < o.length; i++) {
                x[i] += o[i];
            }
            layerNorm(x, rows, d, p[8], p[9]);
            double[] h1 = linear(x, rows, d, p[10], p[11], ffn);
            for (int i = 0; i < h1.length; i++) {
                h1[i] = h1[i] > 0 ? h1[i] : 0;
            }
            double[] h2 = linear(h1, rows, ffn, p[12], p[13], d);
            for (int i = 0; i < h2.length; i++) {
                x[i] += h2[i];
            }
            layerNorm(x, rows, d, p[14], p[15]);
        }
        float[] out = new float[outputs];
        for (int c = 0; c < outputs; c++) {
            double acc = outB[c];
            for (int i = 0; i < d; i++) {
                acc += outW[c * d + i] * x[i];
            }
            out[c] = (float) acc;
        }
        return out;
    }

    /** The task score of logits: regression on the gold scale, binary probability, or the second class's probability. */
    public double score(float[] logits) {
        return task.score(logits);
    }

    /** The blended key of a pair's logits and Hamming distance where the bundle has a blend, else the first logit
     * (web_demo's {@code DiPairHead.key}). */
    public double key(float[] logits, int distance) {
        return blend == null ? logits[0] : blend.keyOfDistance(logits[0], distance);
    }

    /** Binary tasks: the blended key above its dev threshold where the bundle has a blend, else the first logit above
     * the head's threshold (web_demo's {@code DiPairHead.decision}). */
    public boolean decide(float[] logits, int distance) {
        return task.decide(logits, key(logits, distance), blend);
    }

    /** The rank key of a pair's logits and Hamming distance: the blend where the bundle has one, else the probability
     * of the second class for classes and the first logit otherwise (Python's {@code rerank} order). */
    public double rankKey(float[] logits, int distance) {
        return blend == null && "classes".equals(kind) ? PairHead.secondClass(logits) : key(logits, distance);
    }

    /**
     * Reranks a Hamming shortlist: catalog rows {@code ids} with their Hamming {@code distances} to the query, every
     * catalog item's cached side-b states in {@code states} (item i at {@code i * m * d}, float32; an int8 cache as
     * q / 127), by {@link #rankKey}, best first, equal keys to the smaller id. Returns indices into
     * {@code ids} (at most k); {@code keys}, when not null (length ids.length), receives each one's key.
     */
    public int[] rerank(float[] queryStatesA, int[] ids, int[] distances, float[] states, int k, double[] keys) {
        return rerank(queryStatesA, ids, distances, states, null, k, keys);
    }

    /**
     * {@link #rerank(float[], int[], int[], float[], int, double[])} over an int8 cache as a catalog stores it
     * ({@code dipair_states.npy}, {@link Catalog#dipairStates}: item i's m x d values at {@code i * m * d}), each row
     * dequantized as q / 127 when it is scored, so the cache stays m x d bytes per item in memory.
     */
    public int[] rerank(float[] queryStatesA, int[] ids, int[] distances, byte[] int8States, int k, double[] keys) {
        return rerank(queryStatesA, ids, distances, null, int8States, k, keys);
    }

    private int[] rerank(float[] queryStatesA, int[] ids, int[] distances, float[] states, byte[] int8States, int k,
                         double[] keys) {
        final int per = m * d;
        final double[] key = keys != null ? keys : new double[ids.length];
        final long cached = states != null ? states.length : int8States.length;
        Integer[] order = new Integer[ids.length];
        float[] row = new float[per];
        for (int i = 0; i < ids.length; i++) {
            if (ids[i] < 0 || (long) (ids[i] + 1) * per > cached) {
                throw new IllegalArgumentException("catalog row " + ids[i] + " has no cached states");
            }
            if (states != null) {
                System.arraycopy(states, ids[i] * per, row, 0, per);
            } else {
                for (int j = 0, at = ids[i] * per; j < per; j++) {
                    row[j] = int8States[at + j] / 127f;
                }
            }
            key[i] = rankKey(logits(queryStatesA, row), distances[i]);
            order[i] = i;
        }
        final int[] rows = ids;
        java.util.Arrays.sort(order, new java.util.Comparator<Integer>() {
            @Override
            public int compare(Integer x, Integer y) {
                int c = Double.compare(key[y], key[x]);
                return c != 0 ? c : Integer.compare(rows[x], rows[y]);
            }
        });
        int[] out = new int[Math.min(k, ids.length)];
        for (int i = 0; i < out.length; i++) {
            out[i] = order[i];
        }
        return out;
    }
}
