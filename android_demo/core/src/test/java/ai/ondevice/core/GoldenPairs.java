package ai.ondevice.core;

import java.io.File;
import java.io.IOException;
import java.util.Locale;

/**
 * What the pair parity checks share: their command line (BUNDLE_DIR [--max-abs-diff X]), the golden pair index
 * files, row gathering, and the verdict lines they print.
 */
final class GoldenPairs {
    final Bundle bundle;
    final double maxDiff;
    long[] a;
    long[] b;
    double worst;

    private GoldenPairs(Bundle bundle, double maxDiff) {
        this.bundle = bundle;
        this.maxDiff = maxDiff;
    }

    /** Parses the arguments and opens the bundle; exits 2 with a usage line when no bundle is given. */
    static GoldenPairs open(String program, String[] args) throws IOException {
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
            System.err.println("usage: " + program + " BUNDLE_DIR [--max-abs-diff X]");
            System.exit(2);
        }
        return new GoldenPairs(Bundle.open(FileSource.directory(dir)), maxDiff);
    }

    /** Reads golden/{prefix}pair_a.npy and pair_b.npy: row numbers of each pair's two sides. */
    void readPairs(String prefix) throws IOException {
        a = npy(prefix + "pair_a.npy").longs();
        b = npy(prefix + "pair_b.npy").longs();
    }

    Npy npy(String name) throws IOException {
        return Npy.parse(bundle.read("golden/" + name), name);
    }

    /** Row {@code i} (of {@code width} floats) of a row-major array. */
    static float[] row(float[] all, long i, int width) {
        float[] out = new float[width];
        System.arraycopy(all, (int) i * width, out, 0, width);
        return out;
    }

    /** Folds one pair's logits into the worst absolute difference so far. */
    void compare(float[] got, float[] ref, int offset) {
        for (int o = 0; o < got.length; o++) {
            worst = Math.max(worst, Math.abs(got[o] - ref[offset + o]));
        }
    }

    /**
     * Prints the blend lines; a blend key off by more than 1e-5 (the golden keys' float32 rounding) ends the check
     * with the verdict and exit code 1, otherwise {@link #finish} prints the lines and the logits' verdict.
     */
    void finishBlend(String kind, String label, double blendWorst, String... extraLines) {
        String[] lines = new String[extraLines.length + 2];
        System.arraycopy(extraLines, 0, lines, 0, extraLines.length);
        lines[extraLines.length] = "blend_pairs=" + a.length;
        lines[extraLines.length + 1] = String.format(Locale.ROOT, "blend_max_abs_diff=%.3e", blendWorst);
        if (!(blendWorst <= 1e-5)) {
            System.out.println("pairs=" + a.length);
            for (String line : lines) {
                System.out.println(line);
            }
            System.out.println(label + " BLEND PARITY FAILED");
            System.exit(1);
        }
        finish(kind, label, lines);
    }

    /** Prints pairs, kind, max_abs_diff and the verdict, then exits 0 (within maxDiff) or 1. */
    void finish(String kind, String label, String... extraLines) {
        System.out.println("pairs=" + a.length);
        System.out.println("kind=" + kind);
        System.out.println(String.format(Locale.ROOT, "max_abs_diff=%.3e", worst));
        for (String line : extraLines) {
            System.out.println(line);
        }
        boolean ok = worst <= maxDiff && a.length > 0;
        System.out.println(ok ? label + " PARITY OK" : label + " PARITY FAILED");
        System.exit(ok ? 0 : 1);
    }
}
