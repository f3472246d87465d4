package ai.ondevice.core;

import java.util.Arrays;

/**
 * Checks {@link DiPairHead} against the golden DiPair files of {@code ondevice pairs dipair-export --golden}: for
 * every golden pair (rows of golden/dipair_states_a.npy and dipair_states_b.npy), the Java logits against
 * golden/dipair_logits.npy; with a blend in the manifest, also {@link PairBlend#keyOfDistance} of the golden logits and the
 * Hamming distances of the pairs' golden codes against golden/dipair_blend_keys.npy (within 1e-5, the keys' float32
 * rounding). Prints key=value lines and exits non-zero on a mismatch:
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
        // every golden side-b row reranked for golden side-a row 0 (distances from the golden codes): the top 10
        byte[] codes = g.npy("codes.npy").bytes();
        int rows = sb.length / (head.m * head.d);
        int cb = g.bundle.codeBytes();
        int[] ids = new int[rows];
        int[] distances = new int[rows];
        for (int r = 0; r < rows; r++) {
            ids[r] = r;
            distances[r] = Codes.hamming(Codes.toWords(Arrays.copyOfRange(codes, 0, cb)),
                Codes.toWords(Arrays.copyOfRange(codes, r * cb, (r + 1) * cb)));
        }
        double[] rankKeys = new double[rows];
        int[] top = head.rerank(GoldenPairs.row(sa, 0, head.n * head.d), ids, distances, sb, 10, rankKeys);
        StringBuilder topIds = new StringBuilder();
        StringBuilder topKeys = new StringBuilder();
        for (int i = 0; i < top.length; i++) {
            topIds.append(i > 0 ? "," : "").append(ids[top[i]]);
            topKeys.append(i > 0 ? "," : "").append(String.format(java.util.Locale.ROOT, "%.6f", rankKeys[top[i]]));
        }
        System.out.println("rerank_top10=" + topIds);
        System.out.println("rerank_top10_keys=" + topKeys);
        if (head.blend != null && g.bundle.has("golden/dipair_blend_keys.npy")) {
            float[] keys = g.npy("dipair_blend_keys.npy").floats();
            double blendWorst = 0;
            for (int p = 0; p < g.a.length; p++) {
                int distance = Codes.hamming(Codes.toWords(Arrays.copyOfRange(codes, (int) g.a[p] * cb, (int) (g.a[p] + 1) * cb)),
                    Codes.toWords(Arrays.copyOfRange(codes, (int) g.b[p] * cb, (int) (g.b[p] + 1) * cb)));
                blendWorst = Math.max(blendWorst, Math.abs(head.blend.keyOfDistance(ref[p * head.outputs], distance) - keys[p]));
            }
            g.finishBlend(head.kind, "DIPAIR", blendWorst);
        }
        g.finish(head.kind, "DIPAIR");
    }
}
