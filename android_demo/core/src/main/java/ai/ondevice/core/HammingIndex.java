package ai.ondevice.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Brute-force Hamming search over packed codes held as 64-bit words ({@link Long#bitCount} of XOR).
 * Top-k is ordered by distance, ties broken by the smaller row id, exactly as ondevice's Python search.
 */
public final class HammingIndex {
    private final long[] words;
    private final int wordsPerCode;
    private final int size;
    private long[] tags; // per-row attributes for filters (setAttributes), or null
    private int[] categories;
    private byte[] vectors; // per-row int8 vectors for rescoring (setVectors), or null
    private float[] scales;
    private int dim;

    /** Result of a top-k query: row ids and distances, best first (and rescoring scores, else null). */
    public static final class Hits {
        public final int[] ids;
        public final int[] distances;
        public final float[] scores;

        Hits(int[] ids, int[] distances) {
            this(ids, distances, null);
        }

        Hits(int[] ids, int[] distances, float[] scores) {
            this.ids = ids;
            this.distances = distances;
            this.scores = scores;
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

    /** The codes as words, row after row (not a copy): the benchmark's read-bandwidth scan reads this buffer. */
    long[] words() {
        return words;
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

    /** Per-row attributes for filtered search: a 64-bit tag mask and a category per row. */
    public void setAttributes(long[] rowTags, int[] rowCategories) {
        if (rowTags.length != size || rowCategories.length != size) {
            throw new IllegalArgumentException("attributes need one tag mask and one category per row (" + size + ")");
        }
        this.tags = rowTags.clone();
        this.categories = rowCategories.clone();
    }

    /** Per-row int8 vectors ({@code size * dim} values) and scales for rescoring: vector ~= int8 * scale. */
    public void setVectors(byte[] int8, float[] rowScales, int vectorDim) {
        if (vectorDim < 1 || int8.length != (long) size * vectorDim || rowScales.length != size) {
            throw new IllegalArgumentException("int8 vectors need " + size + " x " + vectorDim + " values and " + size
                    + " scales");
        }
        this.vectors = int8.clone();
        this.scales = rowScales.clone();
        this.dim = vectorDim;
    }

    /**
     * Search with a filter (null: none) and int8 rescoring ({@code rescore} = m >= 1 re-ranks the Hamming top m*k by
     * the int8 dot product with {@code queryVector}; 0: off), as Python's HammingIndex.search(filter=, rescore=,
     * query_vectors=). Rows the filter rejects are skipped in the scan: k rows come back whenever k are allowed.
     */
    public Hits search(byte[] query, int k, Filter filter, int rescore, float[] queryVector) {
        long[] q = Codes.toWords(query);
        if (q.length != wordsPerCode) {
            throw new IllegalArgumentException("query has " + q.length + " words, codes have " + wordsPerCode);
        }
        if (rescore < 0) {
            throw new IllegalArgumentException("rescore must be >= 0 (0: off), got " + rescore);
        }
        if (rescore > 0 && (vectors == null || queryVector == null || queryVector.length != dim)) {
            throw new IllegalArgumentException("rescoring needs int8 vectors (setVectors) and a query vector of " + dim
                    + " values");
        }
        int want = (int) Math.max(0, Math.min(rescore > 0 ? (long) k * rescore : k, size));
        int[] hd = new int[want];
        int[] hi = new int[want];
        int n = 0;
        int worst = want == 0 ? Integer.MIN_VALUE : Integer.MAX_VALUE;
        for (int row = 0, base = 0; row < size; row++, base += wordsPerCode) {
            if (filter != null && !filter.allows(tags == null ? 0L : tags[row], categories == null ? 0 : categories[row])) {
                continue;
            }
            int d = 0;
            for (int j = 0; j < wordsPerCode; j++) {
                d += Long.bitCount(q[j] ^ words[base + j]);
            }
            if (d < worst) {
                worst = offer(hd, hi, want, n++, d, row);
            }
        }
        n = Math.min(n, want);
        int[] ids = new int[n];
        int[] dists = new int[n];
        drain(hd, hi, n, ids, dists);
        if (rescore == 0) {
            return new Hits(ids, dists);
        }
        final float[] score = new float[n];
        List<Integer> order = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            int row = ids[i];
            double dot = 0;
            for (int j = 0, o = row * dim; j < dim; j++) {
                dot += vectors[o + j] * (double) queryVector[j];
            }
            score[i] = (float) (dot * scales[row]);
            order.add(i);
        }
        final int[] rows = ids;
        // best score first, ties by the smaller row (as Python)
        Collections.sort(order, (a, b) -> score[a] != score[b] ? Float.compare(score[b], score[a])
                : Integer.compare(rows[a], rows[b]));
        int m = Math.min(k, n);
        int[] outIds = new int[m];
        int[] outDist = new int[m];
        float[] outScores = new float[m];
        for (int i = 0; i < m; i++) {
            int e = order.get(i);
            outScores[i] = score[e];
            outIds[i] = ids[e];
            outDist[i] = dists[e];
        }
        return new Hits(outIds, outDist, outScores);
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
        // While the heap fills, worst stays above every distance, so the scan loop has a single compare per row.
        int[] hd = new int[k];
        int[] hi = new int[k];
        int n = 0;
        int worst = k == 0 ? Integer.MIN_VALUE : Integer.MAX_VALUE;
        final long[] w = words;
        final int wpc = wordsPerCode;
        // Four rows at a time: each query word is loaded once and compared with four rows (four independent sums,
        // so the popcounts do not wait on each other's additions); then the rows are offered in id order.
        final int size4 = size & ~3;
        int row = 0;
        for (int base = 0; row < size4; row += 4, base += 4 * wpc) {
            int d0 = 0;
            int d1 = 0;
            int d2 = 0;
            int d3 = 0;
            for (int j = 0, b = base; j < wpc; j++, b++) {
                long qj = query[j];
                d0 += Long.bitCount(qj ^ w[b]);
                d1 += Long.bitCount(qj ^ w[b + wpc]);
                d2 += Long.bitCount(qj ^ w[b + 2 * wpc]);
                d3 += Long.bitCount(qj ^ w[b + 3 * wpc]);
            }
            if (d0 < worst) {
                worst = offer(hd, hi, k, n++, d0, row);
            }
            if (d1 < worst) {
                worst = offer(hd, hi, k, n++, d1, row + 1);
            }
            if (d2 < worst) {
                worst = offer(hd, hi, k, n++, d2, row + 2);
            }
            if (d3 < worst) {
                worst = offer(hd, hi, k, n++, d3, row + 3);
            }
        }
        for (int base = row * wpc; row < size; row++, base += wpc) {
            int d = 0;
            for (int j = 0; j < wpc; j++) {
                d += Long.bitCount(query[j] ^ w[base + j]);
            }
            if (d < worst) {
                worst = offer(hd, hi, k, n++, d, row);
            }
        }
        n = Math.min(n, k);
        // Pop the heap from the back: largest first.
        int[] ids = new int[n];
        int[] dists = new int[n];
        drain(hd, hi, n, ids, dists);
        return new Hits(ids, dists);
    }

    /**
     * Put (d, row) in the heap, which holds {@code min(seen, k)} entries ({@code seen} offers so far); returns the
     * new admission bound: the worst kept distance once the heap is full, else a value above every distance.
     */
    private static int offer(int[] hd, int[] hi, int k, int seen, int d, int row) {
        if (seen < k) {
            hd[seen] = d;
            hi[seen] = row;
            siftUp(hd, hi, seen);
            return seen + 1 == k ? hd[0] : Integer.MAX_VALUE;
        }
        hd[0] = d;
        hi[0] = row;
        siftDown(hd, hi, k);
        return hd[0];
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

    /** Pops the max-heap of n hits from the back, so ids and dists come out nearest first. */
    private static void drain(int[] hd, int[] hi, int n, int[] ids, int[] dists) {
        for (int m = n; m > 0; m--) {
            ids[m - 1] = hi[0];
            dists[m - 1] = hd[0];
            hd[0] = hd[m - 1];
            hi[0] = hi[m - 1];
            siftDown(hd, hi, m - 1);
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
