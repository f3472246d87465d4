package ai.ondevice.core;

/**
 * Checks {@link DiPairHead} against the golden DiPair files of {@code ondevice pairs dipair-export --golden}: for
 * every golden pair (rows of golden/dipair_states_a.npy and dipair_states_b.npy), the Java logits against
 * golden/dipair_logits.npy. Prints key=value lines and exits non-zero on a mismatch:
 *
 * <pre>java -cp build ai.ondevice.core.DiPairParityCheck BUNDLE_DIR [--max-abs-diff 1e-4]</pre>
 */
public final class DiPairParityCheck {
    private DiPairParityCheck() {
    }

    public static void main(String[] args) throws Exception {
        GoldenPairs g = GoldenPairs.open("DiPairParityCheck", args);
        DiPairHead head = DiPairHead.load(g.bundle);
        float[] sa = g.npy("dipair_states_a.npy").floats();
        float[] sb = g.npy("dipair_states_b.npy").floats();
        g.readPairs("dipair_");
        float[] ref = g.npy("dipair_logits.npy").floats();
        for (int p = 0; p < g.a.length; p++) {
            float[] got = head.logits(GoldenPairs.row(sa, g.a[p], head.n * head.d), GoldenPairs.row(sb, g.b[p], head.m * head.d));
            g.compare(got, ref, p * head.outputs);
        }
        g.finish(head.kind, "DIPAIR");
    }
}
