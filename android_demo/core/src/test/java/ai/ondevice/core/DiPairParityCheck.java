package ai.ondevice.core;

import java.io.File;
import java.util.Locale;

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
            System.err.println("usage: DiPairParityCheck BUNDLE_DIR [--max-abs-diff X]");
            System.exit(2);
        }
        Bundle bundle = Bundle.open(FileSource.directory(dir));
        DiPairHead head = DiPairHead.load(bundle);
        float[] sa = Npy.parse(bundle.read("golden/dipair_states_a.npy"), "dipair_states_a.npy").floats();
        float[] sb = Npy.parse(bundle.read("golden/dipair_states_b.npy"), "dipair_states_b.npy").floats();
        long[] a = Npy.parse(bundle.read("golden/dipair_pair_a.npy"), "dipair_pair_a.npy").longs();
        long[] b = Npy.parse(bundle.read("golden/dipair_pair_b.npy"), "dipair_pair_b.npy").longs();
        float[] ref = Npy.parse(bundle.read("golden/dipair_logits.npy"), "dipair_logits.npy").floats();
        int na = head.n * head.d;
        int nb = head.m * head.d;
        double worst = 0;
        for (int p = 0; p < a.length; p++) {
            float[] u = new float[na];
            float[] v = new float[nb];
            System.arraycopy(sa, (int) a[p] * na, u, 0, na);
            System.arraycopy(sb, (int) b[p] * nb, v, 0, nb);
            float[] got = head.logits(u, v);
            for (int o = 0; o < head.outputs; o++) {
                worst = Math.max(worst, Math.abs(got[o] - ref[p * head.outputs + o]));
            }
        }
        System.out.println("pairs=" + a.length);
        System.out.println("kind=" + head.kind);
        System.out.println(String.format(Locale.ROOT, "max_abs_diff=%.3e", worst));
        boolean ok = worst <= maxDiff && a.length > 0;
        System.out.println(ok ? "DIPAIR PARITY OK" : "DIPAIR PARITY FAILED");
        System.exit(ok ? 0 : 1);
    }
}
