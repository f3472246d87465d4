package ai.ondevice.demo;

import android.content.Context;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import ai.ondevice.core.Bundle;
import ai.ondevice.core.Catalog;
import ai.ondevice.core.Codes;
import ai.ondevice.core.DiPairHead;
import ai.ondevice.core.Encoder;
import ai.ondevice.core.HammingIndex;
import ai.ondevice.core.JavaEncoder;
import ai.ondevice.core.PairHead;
import ai.ondevice.core.Tokenizer;

/**
 * Everything the screen needs, loaded once off the main thread: the verified bundle, an ONNX Runtime encoder,
 * the optional pure-Java encoder (if the bundle was exported with --with-weights), the optional pair head (if the
 * bundle has one, like the shipped bundle's duplicate-question head) or DiPair head (`ondevice pairs dipair-export`),
 * and the verified catalog.
 * Search is: text -> tokenizer -> encoder -> packed code -> Hamming top-k over the catalog; with a DiPair head and a
 * catalog of cached token states, the Hamming top {@link #SHORTLIST} reranked by the head (+ Hamming blend).
 */
final class SearchEngine implements AutoCloseable {
    static final String BUNDLE_DIR = "bundle";
    static final String CATALOG_DIR = "catalog";
    static final int SHORTLIST = 100; // Hamming candidates the DiPair head reranks (as the web page)

    /** One result row. */
    static final class Hit {
        final int row;
        final int distance;
        final String sentence;

        Hit(int row, int distance, String sentence) {
            this.row = row;
            this.distance = distance;
            this.sentence = sentence;
        }
    }

    /** A finished search with its timings. */
    static final class Result {
        final List<Hit> hits;
        final int tokens;
        final double encodeMs;
        final double searchMs;
        final double rerankMs; // -1 when the Hamming order was kept
        final String encoder;

        Result(List<Hit> hits, int tokens, double encodeMs, double searchMs, double rerankMs, String encoder) {
            this.hits = hits;
            this.tokens = tokens;
            this.encodeMs = encodeMs;
            this.searchMs = searchMs;
            this.rerankMs = rerankMs;
            this.encoder = encoder;
        }
    }

    /** Two sentences scored by the pair head. */
    static final class PairResult {
        final double score;
        final double key;
        final Boolean decision; // binary tasks only
        final double ms;

        PairResult(double score, double key, Boolean decision, double ms) {
            this.score = score;
            this.key = key;
            this.decision = decision;
            this.ms = ms;
        }
    }

    final Bundle bundle;
    final Catalog catalog;
    final OnnxEncoder onnx;
    final Encoder java; // null when the bundle has no student.safetensors
    final PairHead pairHead; // null when the bundle has no pair head (or the app was built without its weights)
    final DiPairHead dipair; // null when the bundle has no DiPair head (or the app was built without its weights)
    final double loadMs;

    private SearchEngine(Bundle bundle, Catalog catalog, OnnxEncoder onnx, Encoder java, PairHead pairHead,
                         DiPairHead dipair, double loadMs) {
        this.bundle = bundle;
        this.catalog = catalog;
        this.onnx = onnx;
        this.java = java;
        this.pairHead = pairHead;
        this.dipair = dipair;
        this.loadMs = loadMs;
    }

    /** Loads and verifies everything; throws BundleException (one line, what to do) when an asset is wrong. */
    static SearchEngine load(Context context) throws IOException {
        long t0 = System.nanoTime();
        AssetSource bundleAssets = new AssetSource(context.getAssets(), BUNDLE_DIR);
        // Files are verified (size + SHA-256 against manifest.json) as they are read, so the app may ship only the
        // files it uses (no golden/, no encoder.pt).
        Bundle bundle = Bundle.open(bundleAssets, false);
        Tokenizer tokenizer = bundle.tokenizer();
        int threads = Math.max(1, Math.min(4, Runtime.getRuntime().availableProcessors() / 2));
        OnnxEncoder onnx = new OnnxEncoder(bundle, tokenizer, threads);
        Encoder java = bundle.has("student.safetensors") && bundleAssets.exists("student.safetensors")
                ? JavaEncoder.fromBundle(bundle) : null;
        Object pairs = bundle.manifest().get("pairs");
        PairHead pairHead = pairs instanceof java.util.Map && bundleAssets.exists("pair_head.safetensors")
                ? PairHead.load(bundle) : null;
        Object dipairBlock = bundle.manifest().get("dipair");
        DiPairHead dipair = dipairBlock instanceof java.util.Map && bundleAssets.exists("dipair_head.safetensors")
                ? DiPairHead.load(bundle) : null;
        // every catalog file is checked against catalog.json (size + SHA-256) as it is read
        Catalog catalog = Catalog.load(new AssetSource(context.getAssets(), CATALOG_DIR), bundle);
        return new SearchEngine(bundle, catalog, onnx, java, pairHead, dipair, (System.nanoTime() - t0) / 1e6);
    }

    /** Whether two sentences can be compared: the bundle has a pair head or a DiPair head. */
    boolean canCompare() {
        return pairHead != null || dipair != null;
    }

    /** Whether searches rerank the Hamming shortlist by the DiPair head (its head, and the catalog's cached states). */
    boolean reranks() {
        return dipair != null && catalog.dipairStates != null;
    }

    /** Both sentences through the ONNX encoder, then the pair (or DiPair) head: task score, rank key, decision. */
    PairResult compare(String a, String b) {
        long t0 = System.nanoTime();
        if (pairHead == null) { // a DiPair head: side a's states of the first text, side b's of the second
            OnnxEncoder.StatesEncoding ea = onnx.encodeWithStates(a);
            OnnxEncoder.StatesEncoding eb = onnx.encodeWithStates(b);
            float[] logits = dipair.logits(ea.statesA, eb.statesB);
            int distance = Codes.hamming(Codes.toWords(ea.encoding.code), Codes.toWords(eb.encoding.code));
            Boolean decision = "binary".equals(dipair.kind) ? dipair.decide(logits, distance) : null;
            return new PairResult(dipair.score(logits), dipair.key(logits, distance), decision,
                    (System.nanoTime() - t0) / 1e6);
        }
        float[] u = onnx.encode(a).embedding;
        float[] v = onnx.encode(b).embedding;
        float[] logits = pairHead.logits(u, v);
        Boolean decision = "binary".equals(pairHead.kind) ? pairHead.decide(logits, u, v) : null;
        return new PairResult(pairHead.score(logits), pairHead.key(logits, u, v), decision, (System.nanoTime() - t0) / 1e6);
    }

    Result search(String text, boolean useJava, int k) {
        boolean rerank = reranks() && !(useJava && java != null); // token states come from the ONNX graph
        Encoder encoder = useJava && java != null ? java : onnx;
        long t0 = System.nanoTime();
        OnnxEncoder.StatesEncoding s = rerank ? onnx.encodeWithStates(text) : null;
        Encoder.Encoding e = rerank ? s.encoding : encoder.encode(text);
        long t1 = System.nanoTime();
        HammingIndex.Hits hits = catalog.index.topK(e.code, rerank ? SHORTLIST : k);
        long t2 = System.nanoTime();
        int[] order = null;
        double[] keys = null;
        if (rerank) {
            keys = new double[hits.size()];
            order = dipair.rerank(s.statesA, hits.ids, hits.distances, catalog.dipairStates, k, keys);
        }
        long t3 = System.nanoTime();
        int shown = order != null ? order.length : hits.size();
        List<Hit> out = new ArrayList<Hit>(shown);
        for (int i = 0; i < shown; i++) {
            int j = order != null ? order[i] : i;
            out.add(new Hit(hits.ids[j], hits.distances[j], catalog.sentences.get(hits.ids[j])));
        }
        return new Result(out, e.ids.length, (t1 - t0) / 1e6, (t2 - t1) / 1e6, rerank ? (t3 - t2) / 1e6 : -1,
                rerank ? onnx.name() : encoder.name());
    }

    String describe() {
        return String.format(Locale.ROOT, "%d-d, %d-bit codes, %s · catalog %,d sentences%s · loaded in %.0f ms",
                bundle.dim(), bundle.bits(), bundle.precision(), catalog.size(),
                reranks() ? String.format(Locale.ROOT, " · top %d reranked by the DiPair head", SHORTLIST) : "", loadMs);
    }

    @Override
    public void close() {
        onnx.close();
        if (java != null) {
            java.close();
        }
    }
}
