package ai.ondevice.core;

/**
 * Checks {@link PairHead} against the golden pair files of {@code ondevice pairs export --golden}: for every golden
 * pair (rows of golden/embeddings.npy), the Java logits against golden/pair_logits.npy, and the decisions (binary
 * threshold, class argmax). Prints key=value lines and exits non-zero on a mismatch:
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
        g.finish(head.kind, "PAIR", "decisions_identical=" + sameDecision + "/" + g.a.length);
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
