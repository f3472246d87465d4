package ai.ondevice.core;

import java.util.Map;

/**
 * A DiPair bundle's head + Hamming blend (manifest {@code dipair.blend}, fitted on the task's dev pairs by
 * {@code ondevice pairs dipair-export}): {@code key = (logit - headMean) / headStd + weight * (-distance - simMean) / simStd},
 * where {@code distance} is the Hamming distance of the two sentences' codes (what a Hamming shortlist already has).
 * Higher keys rank first; a binary task decides {@code key > threshold}. The same maths as
 * {@code ondevice.pairs.blend.Blend.keys}, in double.
 */
public final class DiPairBlend {
    public final double weight;
    public final double headMean;
    public final double headStd;
    public final double simMean;
    public final double simStd;
    /** The dev-chosen decision threshold on the key (binary tasks), or NaN. */
    public final double threshold;
    /** Width of the codes whose distances the blend takes. */
    public final int bits;

    private DiPairBlend(double[] v, double threshold, int bits) {
        this.weight = v[0];
        this.headMean = v[1];
        this.headStd = v[2];
        this.simMean = v[3];
        this.simStd = v[4];
        this.threshold = threshold;
        this.bits = bits;
    }

    /** The blend of a manifest {@code dipair} block, null when it has none; a malformed one is a BundleException. */
    static DiPairBlend of(Map<String, Object> dipair, int bundleBits) {
        if (dipair.get("blend") == null) {
            return null;
        }
        String where = "manifest.json dipair.blend";
        Map<String, Object> b = Json.getObject(dipair, "blend", "manifest.json dipair");
        if (!"minus_hamming".equals(b.get("similarity")) || Json.getLong(b, "bits", where) != bundleBits) {
            throw new BundleException(where + ": not a blend over this bundle's " + bundleBits
                + "-bit Hamming distances; re-export the bundle");
        }
        double[] v = {Json.getDouble(b, "weight", where), Json.getDouble(b, "head_mean", where), Json.getDouble(b, "head_std", where),
            Json.getDouble(b, "sim_mean", where), Json.getDouble(b, "sim_std", where)};
        if (v[0] < 0 || v[2] <= 0 || v[4] <= 0) {
            throw new BundleException(where + ": weight must be >= 0 and both standard deviations > 0; re-export the bundle");
        }
        double threshold = b.get("threshold") == null ? Double.NaN : Json.getDouble(b, "threshold", where);
        return new DiPairBlend(v, threshold, bundleBits);
    }

    /** The blended rank key of a head's first logit and the pair's Hamming distance. */
    public double key(double logit, int distance) {
        return (logit - headMean) / headStd + weight * (-distance - simMean) / simStd;
    }
}
