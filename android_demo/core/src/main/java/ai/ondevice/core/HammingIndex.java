package ai.ondevice.core;

/**
 * Brute-force Hamming search over packed codes held as 64-bit words ({@link Long#bitCount} of XOR).
 * Top-k is ordered by distance, ties broken by the smaller row id, exactly as ondevice's Python search.
 */
public final class HammingIndex {
    private final long[] words;
    private final int wordsPerCode;
    private final int size;

    /** Result of a top-k query: row ids and distances, best first. */
    public static final class Hits {
        public final int[] ids;
        public final int[] distances;

        Hits(int[] ids, int[] distances) {
            this.ids = ids;
            this.distances = distances;
        }

        public int size() {
            return ids.length;
        }
    }

    /** An index over {@code codes}: {@code n * codeBytes} bytes, row after row (as in a uint8 (n, codeBytes) .npy). */
    public HammingIndex(byte[] codes, int codeBytes) {
        this.words = Codes.toWords(codes, codeBytes);
        this.wordsPerCode = Codes.words(codeBytes);
        this.size = codes.length / codeBytes;
    }

    public int size() {
        return size;
    }

    public int wordsPerCode() {
        return wordsPerCode;
    }

    /** Distance from a word-packed query to row {@code row}. */
    public int distance(long[] query, int row) {
        int base = row * wordsPerCode;
        int d = 0;
        for (int w = 0; w < wordsPerCode; w++) {
            d += Long.bitCount(query[w] ^ words[base + w]);
        }
        return d;
    }

    /** The {@code k} nearest rows to a packed (byte) query code. */
    public Hits topK(byte[] query, int k) {
        return topK(Codes.toWords(query), k);
    }

    /** The {@code k} nearest rows to a word-packed query: ascending distance, then ascending row id. */
    public Hits topK(long[] query, int k) {
        if (query.length != wordsPerCode) {
            throw new IllegalArgumentException("query has " + query.length + " words, codes have " + wordsPerCode);
        }
        k = Math.max(0, Math.min(k, size));
        // Max-heap on (distance, id) of the best k so far. Rows arrive in increasing id, so a row whose distance
        // equals the current worst is never better than it: only strictly smaller distances enter a full heap.
        int[] hd = new int[k];
        int[] hi = new int[k];
        int n = 0;
        int worst = Integer.MAX_VALUE;
        final long[] w = words;
        final int wpc = wordsPerCode;
        for (int row = 0, base = 0; row < size; row++, base += wpc) {
            int d = 0;
            for (int j = 0; j < wpc; j++) {
                d += Long.bitCount(query[j] ^ w[base + j]);
            }
            if (n < k) {
                hd[n] = d;
                hi[n] = row;
                siftUp(hd, hi, n);
                n++;
                if (n == k) {
                    worst = hd[0];
                }
            } else if (d < worst) {
                hd[0] = d;
                hi[0] = row;
                siftDown(hd, hi, k);
                worst = hd[0];
            }
        }
        // Pop the heap from the back: largest first.
        int[] ids = new int[n];
        int[] dists = new int[n];
        for (int m = n; m > 0; m--) {
            ids[m - 1] = hi[0];
            dists[m - 1] = hd[0];
            hd[0] = hd[m - 1];
            hi[0] = hi[m - 1];
            siftDown(hd, hi, m - 1);
        }
        return new Hits(ids, dists);
    }

    private static boolean greater(int[] hd, int[] hi, int a, int b) {
        return hd[a] > hd[b] || (hd[a] == hd[b] && hi[a] > hi[b]);
    }

    private static void swap(int[] hd, int[] hi, int a, int b) {
        int t = hd[a];
        hd[a] = hd[b];
        hd[b] = t;
        t = hi[a];
        hi[a] = hi[b];
        hi[b] = t;
    }

    private static void siftUp(int[] hd, int[] hi, int i) {
        while (i > 0) {
            int p = (i - 1) / 2;
            if (!greater(hd, hi, i, p)) {
                return;
            }
            swap(hd, hi, i, p);
            i = p;
        }
    }

    private static void siftDown(int[] hd, int[] hi, int n) {
        int i = 0;
        while (true) {
            int l = 2 * i + 1;
            int r = l + 1;
            int m = i;
            if (l < n && greater(hd, hi, l, m)) {
                m = l;
            }
            if (r < n && greater(hd, hi, r, m)) {
                m = r;
            }
            if (m == i) {
                return;
            }
            swap(hd, hi, i, m);
            i = m;
        }
    }
}
