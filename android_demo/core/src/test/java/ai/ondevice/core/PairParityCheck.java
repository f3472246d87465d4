package ai.ondevice.core;

/**
 * Checks {@link PairHead} against the golden pair files of {@code ondevice pairs export --golden}: for every golden
 * pair (rows of golden/embeddings.npy), the Java logits against golden/pair_logits.npy, and the decisions (binary
 * threshold, class argmax); with a blend in the manifest, also {@link PairBlend#key} of the golden logits and the
 * golden embeddings' cosine against golden/pair_blend_keys.npy (within 1e-5, the keys' float32 rounding). Prints
 * key=value lines and exits non-zero on a mismatch:
 *
 * <pre>java -cp build ai.ondevice.core.PairParityCheck BUNDLE_DIR [--max-abs-diff 1e-4]</pre>
 */
public final class PairParityCheck {
    private PairParityCheck() {
    }

    public static void main(String[] args) throws Exception {
        GoldenPairs g = GoldenPairs.open("PairParityCheck", args);
        PairHead head = PairHead.load(g.bundle);
        Npy emb = g.npy("embeddings.npy");
        g.readPairs("");
        float[] ref = g.npy("pair_logits.npy").floats();
        float[] all = emb.floats();
        int dim = emb.cols();
        int sameDecision = 0;
        for (int p = 0; p < g.a.length; p++) {
            float[] got = head.logits(GoldenPairs.row(all, g.a[p], dim), GoldenPairs.row(all, g.b[p], dim));
            float[] want = GoldenPairs.row(ref, p, head.outputs);
            g.compare(got, want, 0);
            sameDecision += decision(head, got) == decision(head, want) ? 1 : 0;
        }
        String decisions = "decisions_identical=" + sameDecision + "/" + g.a.length;
        if (head.blend != null && g.bundle.has("golden/pair_blend_keys.npy")) {
            float[] keys = g.npy("pair_blend_keys.npy").floats();
            double blendWorst = 0;
            int sameBlended = 0;
            for (int p = 0; p < g.a.length; p++) {
                float[] u = GoldenPairs.row(all, g.a[p], dim);
                float[] v = GoldenPairs.row(all, g.b[p], dim);
                double cos = PairBlend.cosine(u, v);
                blendWorst = Math.max(blendWorst, Math.abs(head.blend.key(ref[p * head.outputs], cos) - keys[p]));
                if ("binary".equals(head.kind) && !Double.isNaN(head.blend.threshold)) {
                    // the app's decision on the Java logits against the golden key's, both at the blend's threshold
                    sameBlended += head.decide(head.logits(u, v), u, v) == (keys[p] > head.blend.threshold) ? 1 : 0;
                }
            }
            if ("binary".equals(head.kind) && !Double.isNaN(head.blend.threshold)) {
                g.finishBlend(head.kind, "PAIR", blendWorst, decisions,
                        "blend_decisions_identical=" + sameBlended + "/" + g.a.length);
            }
            g.finishBlend(head.kind, "PAIR", blendWorst, decisions);
        }
        g.finish(head.kind, "PAIR", decisions);
    }

    private static int decision(PairHead head, float[] logits) {
        if ("classes".equals(head.kind)) {
            int best = 0;
            for (int i = 1; i < logits.length; i++) {
                if (logits[i] > logits[best]) {
                    best = i;
                }
            }
            return best;
        }
        return head.positive(logits) ? 1 : 0;
    }
}
