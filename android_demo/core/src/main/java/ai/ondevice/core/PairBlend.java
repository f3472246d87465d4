package ai.ondevice.core;

import java.util.Map;

/**
 * A pair bundle's blend of its head with the same encoder's similarity (manifest {@code pairs.blend} or
 * {@code dipair.blend}, fitted on the task's dev pairs at export): {@code key = (logit - headMean) / headStd + weight *
 * (sim - simMean) / simStd}, where {@code sim} is the cosine of the two embeddings for a DSE head ({@link #cosine}) and
 * minus the Hamming distance of the two codes for a DiPair head ({@link #keyOfDistance}: what a Hamming shortlist
 * already has). Higher keys rank first; a binary task decides {@code key > threshold}. The same maths as
 * {@code ondevice.pairs.blend.Blend.keys}, in double.
 */
public final class PairBlend {
    /** "cosine" (DSE head) or "minus_hamming" (DiPair head). */
    public final String similarity;
    public final double weight;
    public final double headMean;
    public final double headStd;
    public final double simMean;
    public final double simStd;
    /** The dev-chosen decision threshold on the key (binary tasks), or NaN. */
    public final double threshold;

    private PairBlend(String similarity, double[] v, double threshold) {
        this.similarity = similarity;
        this.weight = v[0];
        this.headMean = v[1];
        this.headStd = v[2];
        this.simMean = v[3];
        this.simStd = v[4];
        this.threshold = threshold;
    }

    /**
     * The blend of a manifest head block ({@code key} "pairs" or "dipair"), null when it has none; one over another
     * similarity or width than this bundle's is a BundleException.
     */
    static PairBlend of(Map<String, Object> block, String key, Bundle bundle) {
        if (block.get("blend") == null) {
            return null;
        }
        String where = "manifest.json " + key + ".blend";
        Map<String, Object> b = Json.getObject(block, "blend", "manifest.json " + key);
        boolean dipair = "dipair".equals(key);
        String want = dipair ? "minus_hamming" : "cosine";
        boolean fits = dipair ? Json.getLong(b, "bits", where) == bundle.bits() : Json.getLong(b, "dim", where) == bundle.dim();
        if (!want.equals(b.get("similarity")) || !fits) {
            throw new BundleException(where + ": not a blend over this bundle's " + want + " ("
                + (dipair ? bundle.bits() + " bits" : bundle.dim() + "-d") + "); re-export the bundle");
        }
        double[] v = {Json.getDouble(b, "weight", where), Json.getDouble(b, "head_mean", where), Json.getDouble(b, "head_std", where),
            Json.getDouble(b, "sim_mean", where), Json.getDouble(b, "sim_std", where)};
        if (v[0] < 0 || v[2] <= 0 || v[4] <= 0) {
            throw new BundleException(where + ": weight must be >= 0 and both standard deviations > 0; re-export the bundle");
        }
        double threshold = b.get("threshold") == null ? Double.NaN : Json.getDouble(b, "threshold", where);
        return new PairBlend(want, v, threshold);
    }

    /** The blended rank key of a head's first logit and the pair's similarity. */
    public double key(double logit, double sim) {
        return (logit - headMean) / headStd + weight * (sim - simMean) / simStd;
    }

    /** The key of a DiPair head's first logit and the pair's Hamming distance (sim = -distance). */
    public double keyOfDistance(double logit, int distance) {
        return key(logit, -distance);
    }

    /** The cosine of two embeddings (the similarity of a DSE head's blend), summed in double. */
    public static double cosine(float[] u, float[] v) {
        double dot = 0;
        double nu = 0;
        double nv = 0;
        for (int i = 0; i < u.length; i++) {
            dot += (double) u[i] * v[i];
            nu += (double) u[i] * u[i];
            nv += (double) v[i] * v[i];
        }
        return dot / Math.max(Math.sqrt(nu) * Math.sqrt(nv), 1e-12);
    }
}
