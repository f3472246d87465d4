package ai.ondevice.core;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;

/**
 * JVM benchmark of the core, single thread, on a default-size random student (vocab 50k, embedding 50,
 * hidden 256, mean pooling, output 384, 2048 bits): single-sentence encode latency (tokenize + forward pass +
 * binarize) at several sentence lengths, and Hamming top-10 over 100k random 2048-bit codes.
 *
 * <pre>java -cp build ai.ondevice.core.Benchmark [--quick]</pre>
 */
public final class Benchmark {
    private static final ThreadMXBean CPU = ManagementFactory.getThreadMXBean();

    private Benchmark() {
    }

    public static void main(String[] args) {
        boolean quick = args.length > 0 && "--quick".equals(args[0]);
        int vocabSize = 50000;
        int emb = 50;
        int hidden = 256;
        int out = 384;
        int bits = 2048;
        int catalog = 100000;
        Random rnd = new Random(6);

        List<String> vocab = new ArrayList<String>(vocabSize);
        vocab.add(Tokenizer.PAD);
        vocab.add(Tokenizer.UNK);
        for (int i = 2; i < vocabSize; i++) {
            vocab.add("w" + Integer.toString(i, 36));
        }
        Tokenizer tok = new Tokenizer(vocab, 128);
        Student.Config cfg = new Student.Config(vocabSize, emb, hidden, "mean", out);
        Map<String, float[]> w = new HashMap<String, float[]>();
        for (Map.Entry<String, int[]> e : Student.shapes(cfg).entrySet()) {
            int n = 1;
            for (int d : e.getValue()) {
                n *= d;
            }
            w.put(e.getKey(), uniform(rnd, n, (float) (1 / Math.sqrt(hidden))));
        }
        Student student = new Student(cfg, w);
        Binarizer bin = new Binarizer(out, bits, uniform(rnd, out * bits, 0.05f), uniform(rnd, bits, 0.01f));
        JavaEncoder enc = new JavaEncoder(tok, student, bin);
        System.out.println(String.format(Locale.ROOT, "java %s (%s), %d available processors, single thread",
                System.getProperty("java.version"), System.getProperty("java.vm.name"), Runtime.getRuntime().availableProcessors()));
        System.out.println("student: vocab 50000, embedding 50, hidden 256 (BiLSTM), mean pooling, output 384; 2048-bit codes");

        int warm = quick ? 30 : 300;
        int reps = quick ? 50 : 500;
        for (int len : new int[] {8, 16, 32}) {
            String[] texts = new String[64];
            for (int i = 0; i < texts.length; i++) {
                StringBuilder sb = new StringBuilder();
                for (int t = 0; t < len; t++) {
                    sb.append(t == 0 ? "" : " ").append(vocab.get(2 + rnd.nextInt(vocabSize - 2)).toUpperCase(Locale.ROOT));
                }
                texts[i] = sb.toString() + ".";
            }
            for (int i = 0; i < warm; i++) {
                enc.encode(texts[i % texts.length]);
            }
            long[] ns = new long[reps];
            long[] cpu = new long[reps];
            for (int i = 0; i < reps; i++) {
                long c0 = CPU.getCurrentThreadCpuTime();
                long t0 = System.nanoTime();
                enc.encode(texts[i % texts.length]);
                ns[i] = System.nanoTime() - t0;
                cpu[i] = CPU.getCurrentThreadCpuTime() - c0;
            }
            report("encode " + len + " words (+1 punctuation token)", ns, cpu);
        }

        byte[] codes = new byte[catalog * (bits / 8)];
        rnd.nextBytes(codes);
        long t0 = System.nanoTime();
        HammingIndex index = new HammingIndex(codes, bits / 8);
        System.out.println(String.format(Locale.ROOT, "index build (100k x 256 bytes -> longs): %.1f ms", (System.nanoTime() - t0) / 1e6));
        int qWarm = quick ? 5 : 30;
        int qReps = quick ? 10 : 100;
        byte[] q = new byte[bits / 8];
        long[] words = index.words();
        long sink = 0;
        for (int i = 0; i < qWarm; i++) {
            rnd.nextBytes(q);
            sink += index.topK(q, 10).ids[0] + sumLongs(words) + sumLongs4(words);
        }
        // The read-bandwidth bound of this JVM: the simplest full scan of the same buffer (a sum of its longs, with
        // one accumulator and with four), timed in turns with the top-10 so that all three see the same machine.
        long[][] ns = new long[3][qReps];
        long[][] cpu = new long[3][qReps];
        for (int i = 0; i < qReps; i++) {
            rnd.nextBytes(q);
            for (int what = 0; what < 3; what++) {
                long c0 = CPU.getCurrentThreadCpuTime();
                long s = System.nanoTime();
                sink += what == 0 ? index.topK(q, 10).ids[0] : what == 1 ? sumLongs(words) : sumLongs4(words);
                ns[what][i] = System.nanoTime() - s;
                cpu[what][i] = CPU.getCurrentThreadCpuTime() - c0;
            }
        }
        report("hamming top-10 over 100,000 x 2048-bit codes", ns[0], cpu[0]);
        report("read bound: sum of the same 3.2M longs", ns[1], cpu[1]);
        report("read bound: sum of the same longs, 4 sums", ns[2], cpu[2]);
        System.out.println("(checksum " + sink + ")");
    }

    /** Sum of every long: the least work a full scan of the codes can do. */
    static long sumLongs(long[] a) {
        long s = 0;
        for (int i = 0; i < a.length; i++) {
            s += a[i];
        }
        return s;
    }

    /** The same with four independent sums, in case one accumulator's dependency chain is what limits it. */
    static long sumLongs4(long[] a) {
        long s0 = 0;
        long s1 = 0;
        long s2 = 0;
        long s3 = 0;
        int i = 0;
        for (; i + 3 < a.length; i += 4) {
            s0 += a[i];
            s1 += a[i + 1];
            s2 += a[i + 2];
            s3 += a[i + 3];
        }
        for (; i < a.length; i++) {
            s0 += a[i];
        }
        return (s0 + s1) + (s2 + s3);
    }

    private static float[] uniform(Random r, int n, float scale) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) {
            a[i] = (r.nextFloat() * 2 - 1) * scale;
        }
        return a;
    }

    /** Wall-clock p50/p99/mean, and the thread's CPU-time p50 (less sensitive to other load on the machine). */
    private static void report(String what, long[] ns, long[] cpu) {
        long[] s = ns.clone();
        Arrays.sort(s);
        long[] c = cpu.clone();
        Arrays.sort(c);
        double mean = 0;
        for (long x : s) {
            mean += x;
        }
        mean /= s.length;
        System.out.println(String.format(Locale.ROOT, "%-46s p50 %7.3f ms  p99 %7.3f ms  mean %7.3f ms  cpu p50 %7.3f ms  (n=%d)",
                what, s[s.length / 2] / 1e6, s[Math.min(s.length - 1, (int) Math.ceil(s.length * 0.99) - 1)] / 1e6, mean / 1e6,
                c[c.length / 2] / 1e6, s.length));
    }
}
