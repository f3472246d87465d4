package ai.ondevice.core;

import java.util.Map;

/**
 * The bundle's optional pair head ({@code ondevice pairs export}): scores two sentence embeddings with
 * {@code logits = W2 relu(W1 [u, v, u*v, |u-v|] + b1) + b2}, read from the fp32 {@code pair_head.safetensors}
 * that the manifest's {@code pairs} block names (size and SHA-256 verified on read). Sums run in double, so the
 * logits match the Python golden files to float rounding.
 */
public final class PairHead {
    public final int dim;
    public final int hidden;
    public final int outputs;
    /** "regression", "binary" or "classes". */
    public final String kind;
    /** The head + embedding-cosine blend the bundle ranks by ({@link PairBlend}), or null when the manifest has none. */
    public final PairBlend blend;
    private final float[] w1; // [hidden][4 dim], row-major
    private final float[] b1;
    private final float[] w2; // [outputs][hidden]
    private final float[] b2;
    private final TaskOutput task;

    private PairHead(int dim, int hidden, int outputs, TaskOutput task, float[] w1, float[] b1, float[] w2, float[] b2,
                     PairBlend blend) {
        this.dim = dim;
        this.blend = blend;
        this.hidden = hidden;
        this.outputs = outputs;
        this.kind = task.kind;
        this.task = task;
        this.w1 = w1;
        this.b1 = b1;
        this.w2 = w2;
        this.b2 = b2;
    }

    /** Loads the pair head of {@code bundle}; fails with a BundleException if the bundle has none. */
    public static PairHead load(Bundle bundle) {
        Map<String, Object> m = bundle.manifest();
        if (!(m.get("pairs") instanceof Map)) {
            throw new BundleException("bundle " + bundle.describe() + " has no pair head; export one with `ondevice pairs export`");
        }
        Map<String, Object> block = Json.getObject(m, "pairs", "manifest.json");
        Map<String, Object> head = Json.getObject(block, "head", "manifest.json pairs");
        int dim = (int) Json.getLong(head, "dim", "manifest.json pairs.head");
        int hidden = (int) Json.getLong(head, "hidden", "manifest.json pairs.head");
        int outputs = (int) Json.getLong(head, "outputs", "manifest.json pairs.head");
        String kind = Json.getString(block, "task_type", "manifest.json pairs");
        if (dim != bundle.dim()) {
            throw new BundleException("manifest.json: pair head takes " + dim + "-d vectors but the encoder makes " + bundle.dim());
        }
        if (hidden < 1 || outputs < 1 || outputs > 1024 || ("classes".equals(kind) ? outputs < 1 : outputs != 1)
                || !("regression".equals(kind) || "binary".equals(kind) || "classes".equals(kind))) {
            throw new BundleException("manifest.json: pair head of " + hidden + " hidden units and " + outputs
                    + " outputs for a '" + kind + "' task does not fit; re-export the bundle");
        }
        String file = Json.getString(block, "weights", "manifest.json pairs");
        SafeTensors st = SafeTensors.parse(bundle.read(file), file);
        float[] w1 = st.get("hidden.weight", file).requireShape(file, hidden, 4 * dim).floats();
        float[] b1 = st.get("hidden.bias", file).requireShape(file, hidden).floats();
        float[] w2 = st.get("out.weight", file).requireShape(file, outputs, hidden).floats();
        float[] b2 = st.get("out.bias", file).requireShape(file, outputs).floats();
        Json.getObject(block, "output_transform", "manifest.json pairs"); // DSE exports always write it
        return new PairHead(dim, hidden, outputs, TaskOutput.of(block, "manifest.json pairs"), w1, b1, w2, b2,
                PairBlend.of(block, "pairs", bundle));
    }

    /** Head logits (length {@code outputs}) of one pair of embeddings. */
    public float[] logits(float[] u, float[] v) {
        if (u.length != dim || v.length != dim) {
            throw new IllegalArgumentException("pair head takes " + dim + "-d vectors, got " + u.length + " and " + v.length);
        }
        double[] f = new double[4 * dim];
        for (int i = 0; i < dim; i++) {
            f[i] = u[i];
            f[dim + i] = v[i];
            f[2 * dim + i] = (double) (u[i] * v[i]);
            f[3 * dim + i] = (double) Math.abs(u[i] - v[i]);
        }
        double[] h = new double[hidden];
        int width = 4 * dim;
        for (int j = 0; j < hidden; j++) {
            double s = b1[j];
            int row = j * width;
            for (int i = 0; i < width; i++) {
                s += w1[row + i] * f[i];
            }
            h[j] = s > 0 ? s : 0;
        }
        float[] out = new float[outputs];
        for (int o = 0; o < outputs; o++) {
            double s = b2[o];
            for (int j = 0; j < hidden; j++) {
                s += w2[o * hidden + j] * h[j];
            }
            out[o] = (float) s;
        }
        return out;
    }

    /** The task score of logits: regression on the gold scale, binary probability, or the second class's probability. */
    public double score(float[] logits) {
        return task.score(logits);
    }

    /** The softmax probability of the second class (of the only one for a single output), in double. */
    static double secondClass(float[] logits) {
        double max = Double.NEGATIVE_INFINITY;
        for (float x : logits) {
            max = Math.max(max, x);
        }
        double sum = 0;
        for (float x : logits) {
            sum += Math.exp(x - max);
        }
        return Math.exp(logits[logits.length > 1 ? 1 : 0] - max) / sum;
    }

    /** Binary tasks: whether the pair is positive (logit above the dev-tuned threshold). */
    public boolean positive(float[] logits) {
        return task.positive(logits);
    }

    /** The rank key of a pair: the blend of the first logit with the embeddings' cosine where the bundle has one,
     * else the first logit (Python's {@code pair_keys}). */
    public double key(float[] logits, float[] u, float[] v) {
        return blend == null ? logits[0] : blend.key(logits[0], PairBlend.cosine(u, v));
    }

    /** Binary tasks: the decision an app makes, the blended key above its dev threshold where the bundle has a
     * blend, else {@link #positive} (Python's {@code pair_decisions}). */
    public boolean decide(float[] logits, float[] u, float[] v) {
        return task.decide(logits, key(logits, u, v), blend);
    }

    /** Rows of {@code candidates} with the k highest scores for {@code query}, best first, ties by smaller row. */
    public int[] rerank(float[] query, float[][] candidates, int k) {
        int n = candidates.length;
        final double[] key = new double[n];
        Integer[] order = new Integer[n];
        for (int i = 0; i < n; i++) {
            float[] l = logits(query, candidates[i]);
            key[i] = "classes".equals(kind) ? score(l) : l[0];
            order[i] = i;
        }
        java.util.Arrays.sort(order, new java.util.Comparator<Integer>() {
            @Override
            public int compare(Integer a, Integer b) {
                int c = Double.compare(key[b], key[a]);
                return c != 0 ? c : Integer.compare(a, b);
            }
        });
        int m = Math.min(k, n);
        int[] out = new int[m];
        for (int i = 0; i < m; i++) {
            out[i] = order[i];
        }
        return out;
    }
}
