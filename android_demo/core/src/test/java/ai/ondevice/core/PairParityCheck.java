package ai.ondevice.core;

import java.io.File;
import java.util.Locale;

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
        double maxDiff = 1e-4;
        File dir = null;
        for (int i = 0; i < args.length; i++) {
            if ("--max-abs-diff".equals(args[i]) && i + 1 < args.length) {
                maxDiff = Double.parseDouble(args[++i]);
            } else {
                dir = new File(args[i]);
            }
        }
        if (dir == null) {
            System.err.println("usage: PairParityCheck BUNDLE_DIR [--max-abs-diff X]");
            System.exit(2);
        }
        Bundle bundle = Bundle.open(FileSource.directory(dir));
        PairHead head = PairHead.load(bundle);
        Npy emb = Npy.parse(bundle.read("golden/embeddings.npy"), "embeddings.npy");
        long[] a = Npy.parse(bundle.read("golden/pair_a.npy"), "pair_a.npy").longs();
        long[] b = Npy.parse(bundle.read("golden/pair_b.npy"), "pair_b.npy").longs();
        float[] ref = Npy.parse(bundle.read("golden/pair_logits.npy"), "pair_logits.npy").floats();
        float[] all = emb.floats();
        int dim = emb.cols();
        double worst = 0;
        int sameDecision = 0;
        for (int p = 0; p < a.length; p++) {
            float[] u = new float[dim];
            float[] v = new float[dim];
            System.arraycopy(all, (int) a[p] * dim, u, 0, dim);
            System.arraycopy(all, (int) b[p] * dim, v, 0, dim);
            float[] got = head.logits(u, v);
            float[] want = new float[head.outputs];
            System.arraycopy(ref, p * head.outputs, want, 0, head.outputs);
            for (int o = 0; o < head.outputs; o++) {
                worst = Math.max(worst, Math.abs(got[o] - want[o]));
            }
            sameDecision += decision(head, got) == decision(head, want) ? 1 : 0;
        }
        System.out.println("pairs=" + a.length);
        System.out.println("kind=" + head.kind);
        System.out.println(String.format(Locale.ROOT, "max_abs_diff=%.3e", worst));
        System.out.println("decisions_identical=" + sameDecision + "/" + a.length);
        boolean ok = worst <= maxDiff && a.length > 0;
        System.out.println(ok ? "PAIR PARITY OK" : "PAIR PARITY FAILED");
        System.exit(ok ? 0 : 1);
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
