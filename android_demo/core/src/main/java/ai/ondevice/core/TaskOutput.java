package ai.ondevice.core;

import java.util.Map;

/**
 * What a pair head's logits mean for its task, from the manifest block of a DSE ({@code pairs}) or DiPair
 * ({@code dipair}) head: its task type, output transform (regression) and dev-tuned threshold (binary).
 */
final class TaskOutput {
    /** "regression", "binary" or "classes". */
    final String kind;
    private final double scale;
    private final double offset;
    private final double threshold;

    private TaskOutput(String kind, double scale, double offset, double threshold) {
        this.kind = kind;
        this.scale = scale;
        this.offset = offset;
        this.threshold = threshold;
    }

    static TaskOutput of(Map<String, Object> block, String where) {
        String kind = Json.getString(block, "task_type", where);
        if (!("regression".equals(kind) || "binary".equals(kind) || "classes".equals(kind))) {
            throw new BundleException(where + ".task_type is not regression, binary or classes; re-export the bundle");
        }
        Object t = block.get("output_transform");
        Map<?, ?> transform = t instanceof Map ? (Map<?, ?>) t : java.util.Collections.emptyMap();
        return new TaskOutput(kind, number(transform.get("scale"), 1.0), number(transform.get("offset"), 0.0),
                number(block.get("threshold"), 0.0));
    }

    private static double number(Object v, double fallback) {
        return v instanceof Number ? ((Number) v).doubleValue() : fallback;
    }

    /** The task score of logits: regression on the gold scale, binary probability, or the second class's probability. */
    double score(float[] logits) {
        if ("regression".equals(kind)) {
            return logits[0] * scale + offset;
        }
        if ("binary".equals(kind)) {
            return 1.0 / (1.0 + Math.exp(-logits[0]));
        }
        return PairHead.secondClass(logits);
    }

    /** Binary tasks: the first logit above the dev-tuned threshold. */
    boolean positive(float[] logits) {
        return logits[0] > threshold;
    }

    /** Binary tasks: the blended key above its dev threshold where the bundle has a blend, else {@link #positive}. */
    boolean decide(float[] logits, double blendedKey, PairBlend blend) {
        if (!"binary".equals(kind)) {
            throw new IllegalStateException("decisions are for binary tasks; this head is " + kind);
        }
        return blend != null && !Double.isNaN(blend.threshold) ? blendedKey > blend.threshold : positive(logits);
    }
}
