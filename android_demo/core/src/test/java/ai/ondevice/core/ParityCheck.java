package ai.ondevice.core;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Checks the Java core against the golden files of {@code ondevice export --golden} (and, if the bundle has
 * student.safetensors, the pure-Java forward pass). Prints one {@code key=value} line per measurement and exits
 * non-zero on any mismatch:
 *
 * <pre>java -cp build ai.ondevice.core.ParityCheck BUNDLE_DIR... [--min-bit-agreement 0.999] [--min-mean-cosine 0.9999]</pre>
 */
public final class ParityCheck {
    private ParityCheck() {
    }

    public static void main(String[] args) throws Exception {
        double minBits = 0.999;
        double minCos = 0.9999;
        List<File> dirs = new ArrayList<File>();
        for (int i = 0; i < args.length; i++) {
            if ("--min-bit-agreement".equals(args[i]) && i + 1 < args.length) {
                minBits = Double.parseDouble(args[++i]);
            } else if ("--min-mean-cosine".equals(args[i]) && i + 1 < args.length) {
                minCos = Double.parseDouble(args[++i]);
            } else if (args[i].startsWith("--")) {
                throw new IllegalArgumentException("unknown option " + args[i]);
            } else {
                dirs.add(new File(args[i]));
            }
        }
        if (dirs.isEmpty()) {
            System.err.println("usage: ParityCheck BUNDLE_DIR... [--min-bit-agreement X] [--min-mean-cosine X]");
            System.exit(2);
        }
        boolean ok = true;
        for (File dir : dirs) {
            System.out.println("bundle=" + dir.getPath());
            ok &= check(dir, minBits, minCos);
        }
        System.exit(ok ? 0 : 1);
    }

    /** Checks one bundle; prints its measurements and returns whether everything matched. */
    static boolean check(File dir, double minBits, double minCos) throws Exception {
        List<String> failures = new ArrayList<String>();
        long t0 = System.nanoTime();
        Bundle bundle;
        try {
            bundle = Bundle.open(FileSource.directory(dir));
        } catch (BundleException e) {
            System.out.println("bundle_error=" + e.getMessage());
            return false;
        }
        System.out.println("bundle_verified_files=" + bundle.fileNames().size());
        System.out.println(String.format(Locale.ROOT, "bundle dim=%d bits=%d code_bytes=%d precision=%s",
                bundle.dim(), bundle.bits(), bundle.codeBytes(), bundle.precision()));

        // 1. Tokenizer: ids identical for every golden sentence.
        Tokenizer tok = bundle.tokenizer();
        List<String> sentences = readSentences(bundle, dir);
        List<String> idLines = lines(golden(bundle, dir, "golden/token_ids.txt"));
        if (idLines.size() != sentences.size()) {
            failures.add("token_ids.txt has " + idLines.size() + " lines for " + sentences.size() + " sentences");
        }
        int n = Math.min(idLines.size(), sentences.size());
        int same = 0;
        int shown = 0;
        List<int[]> javaIds = new ArrayList<int[]>();
        for (int i = 0; i < n; i++) {
            int[] ids = tok.ids(sentences.get(i));
            javaIds.add(ids);
            String line = join(ids);
            if (line.equals(idLines.get(i).trim())) {
                same++;
            } else if (shown++ < 5) {
                System.out.println("token_mismatch row=" + i + " unknown_to_jvm=" + undefinedCodePoints(sentences.get(i))
                        + " python=[" + idLines.get(i).trim() + "] java=[" + line + "]");
            }
        }
        System.out.println("sentences=" + sentences.size());
        System.out.println("tokens_identical=" + same + "/" + n);
        if (same != n || n == 0) {
            failures.add("token ids differ on " + (n - same) + " of " + n + " sentences");
        }

        // 2. Hamming top-10 over the golden catalog, given the golden codes.
        Npy codes = bundle.npy("golden/codes.npy");
        Npy catalog = bundle.npy("golden/catalog_codes.npy");
        long[] queries = bundle.npy("golden/queries.npy").longs();
        Npy topIds = bundle.npy("golden/topk_ids.npy");
        long[] expIds = topIds.longs();
        long[] expDist = bundle.npy("golden/topk_dist.npy").longs();
        int k = topIds.cols();
        int cb = bundle.codeBytes();
        if (codes.cols() != cb || catalog.cols() != cb) {
            failures.add("golden code width " + codes.cols() + "/" + catalog.cols() + " != code_bytes " + cb);
        }
        byte[] codeBytes = codes.bytes();
        HammingIndex index = new HammingIndex(catalog.bytes(), cb);
        int topSame = 0;
        for (int q = 0; q < queries.length; q++) {
            byte[] query = new byte[cb];
            System.arraycopy(codeBytes, (int) queries[q] * cb, query, 0, cb);
            HammingIndex.Hits hits = index.topK(query, k);
            boolean ok = hits.size() == k;
            for (int j = 0; ok && j < k; j++) {
                ok = hits.ids[j] == expIds[q * k + j] && hits.distances[j] == expDist[q * k + j];
            }
            if (ok) {
                topSame++;
            } else if (shown++ < 10) {
                System.out.println("topk_mismatch query=" + q + " java_ids=" + join(hits.ids) + " java_dist=" + join(hits.distances));
            }
        }
        System.out.println("catalog=" + index.size() + " queries=" + queries.length + " k=" + k);
        System.out.println("topk_identical=" + topSame + "/" + queries.length);
        if (topSame != queries.length || queries.length == 0) {
            failures.add("Hamming top-" + k + " differs on " + (queries.length - topSame) + " of " + queries.length + " queries");
        }

        // 3. The pure-Java encoder, end to end from text (if the bundle carries the student's weights).
        if (bundle.has("student.safetensors")) {
            JavaEncoder enc = JavaEncoder.fromBundle(bundle);
            float[] golden = bundle.npy("golden/embeddings.npy").floats();
            int dim = bundle.dim();
            int bits = bundle.bits();
            double cosSum = 0;
            double cosMin = 1;
            double maxAbs = 0;
            long agree = 0;
            long total = 0;
            int codesIdentical = 0;
            long t1 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                Encoder.Encoding e = enc.encodeIds(javaIds.get(i));
                double dot = 0;
                double na = 0;
                double nb = 0;
                for (int j = 0; j < dim; j++) {
                    double a = e.embedding[j];
                    double b = golden[i * dim + j];
                    dot += a * b;
                    na += a * a;
                    nb += b * b;
                    maxAbs = Math.max(maxAbs, Math.abs(a - b));
                }
                double cos = dot / Math.max(Math.sqrt(na * nb), 1e-30);
                cosSum += cos;
                cosMin = Math.min(cosMin, cos);
                byte[] ref = new byte[cb];
                System.arraycopy(codeBytes, i * cb, ref, 0, cb);
                int a = Codes.agreeingBits(e.code, ref, bits);
                agree += a;
                total += bits;
                if (a == bits) {
                    codesIdentical++;
                } else {
                    for (int bit = 0; bit < bits; bit++) {  // which bits: the test checks each sits at a tie of the sign
                        if (((e.code[bit >> 3] ^ ref[bit >> 3]) >> (bit & 7) & 1) != 0) {
                            System.out.println("code_bit_differs=" + i + ":" + bit);
                        }
                    }
                }
            }
            double encMs = (System.nanoTime() - t1) / 1e6;
            double meanCos = n == 0 ? 0 : cosSum / n;
            double bitAgree = total == 0 ? 0 : (double) agree / total;
            System.out.println(String.format(Locale.ROOT, "mean_cosine=%.8f", meanCos));
            System.out.println(String.format(Locale.ROOT, "min_cosine=%.8f", cosMin));
            System.out.println(String.format(Locale.ROOT, "max_abs_diff=%.3e", maxAbs));
            System.out.println(String.format(Locale.ROOT, "bit_agreement=%.6f (%d/%d bits)", bitAgree, agree, total));
            System.out.println("codes_identical=" + codesIdentical + "/" + n);
            System.out.println(String.format(Locale.ROOT, "java_encode_ms_total=%.1f", encMs));
            if (meanCos < minCos) {
                failures.add(String.format(Locale.ROOT, "mean cosine %.6f < %.6f", meanCos, minCos));
            }
            if (bitAgree < minBits) {
                failures.add(String.format(Locale.ROOT, "bit agreement %.6f < %.6f", bitAgree, minBits));
            }
        } else {
            System.out.println("java_encoder=skipped (bundle has no student.safetensors; export with --with-weights)");
        }
        System.out.println(String.format(Locale.ROOT, "elapsed_ms=%.0f", (System.nanoTime() - t0) / 1e6));
        if (!failures.isEmpty()) {
            for (String f : failures) {
                System.out.println("FAIL " + f);
            }
            return false;
        }
        System.out.println("PARITY OK");
        return true;
    }

    /** Golden files are normally listed (and so verified) in the manifest; read them directly otherwise. */
    static byte[] golden(Bundle bundle, File dir, String name) throws Exception {
        return bundle.has(name) ? bundle.read(name) : Files.readAllBytes(new File(dir, name).toPath());
    }

    static List<String> readSentences(Bundle bundle, File dir) throws Exception {
        List<String> out = new ArrayList<String>();
        for (String line : lines(golden(bundle, dir, "golden/sentences.jsonl"))) {
            if (!line.trim().isEmpty()) {
                Object v = Json.parse(line);
                if (!(v instanceof String)) {
                    throw new BundleException("golden/sentences.jsonl: every line must be a JSON string");
                }
                out.add((String) v);
            }
        }
        return out;
    }

    static List<String> readSentencesFile(File file) throws Exception {
        List<String> out = new ArrayList<String>();
        for (String line : lines(Files.readAllBytes(file.toPath()))) {
            if (!line.trim().isEmpty()) {
                out.add((String) Json.parse(line));
            }
        }
        return out;
    }

    static List<String> lines(byte[] data) {
        List<String> out = new ArrayList<String>();
        String text = new String(data, StandardCharsets.UTF_8);
        int start = 0;
        for (int i = 0; i < text.length(); i++) {
            if (text.charAt(i) == '\n') {
                out.add(text.substring(start, i));
                start = i + 1;
            }
        }
        if (start < text.length()) {
            out.add(text.substring(start));
        }
        return out;
    }

    static String join(int[] a) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < a.length; i++) {
            if (i > 0) {
                sb.append(' ');
            }
            sb.append(a[i]);
        }
        return sb.toString();
    }

    /** Code points this JVM's Unicode tables do not know (a newer Unicode version than the JVM's). */
    static int undefinedCodePoints(String s) {
        int count = 0;
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            i += Character.charCount(cp);
            if (!Character.isDefined(cp)) {
                count++;
            }
        }
        return count;
    }
}
