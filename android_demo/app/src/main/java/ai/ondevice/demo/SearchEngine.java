package ai.ondevice.demo;

import android.content.Context;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import ai.ondevice.core.Bundle;
import ai.ondevice.core.Encoder;
import ai.ondevice.core.HammingIndex;
import ai.ondevice.core.JavaEncoder;
import ai.ondevice.core.PairHead;
import ai.ondevice.core.Tokenizer;

/**
 * Everything the screen needs, loaded once off the main thread: the verified bundle, an ONNX Runtime encoder,
 * the optional pure-Java encoder (if the bundle was exported with --with-weights), the optional pair head (if the
 * bundle has one, like the shipped bundle's duplicate-question head) and the catalog's index.
 * Search is: text -> tokenizer -> encoder -> packed code -> Hamming top-k over the catalog.
 */
final class SearchEngine implements AutoCloseable {
    static final String BUNDLE_DIR = "bundle";
    static final String CATALOG_DIR = "catalog";

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
        final String encoder;

        Result(List<Hit> hits, int tokens, double encodeMs, double searchMs, String encoder) {
            this.hits = hits;
            this.tokens = tokens;
            this.encodeMs = encodeMs;
            this.searchMs = searchMs;
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
    final Encoder onnx;
    final Encoder java; // null when the bundle has no student.safetensors
    final PairHead pairHead; // null when the bundle has no pair head (or the app was built without its weights)
    final double loadMs;

    private SearchEngine(Bundle bundle, Catalog catalog, Encoder onnx, Encoder java, PairHead pairHead, double loadMs) {
        this.bundle = bundle;
        this.catalog = catalog;
        this.onnx = onnx;
        this.java = java;
        this.pairHead = pairHead;
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
        Encoder onnx = new OnnxEncoder(bundle, tokenizer, threads);
        Encoder java = bundle.has("student.safetensors") && bundleAssets.exists("student.safetensors")
                ? JavaEncoder.fromBundle(bundle) : null;
        Object pairs = bundle.manifest().get("pairs");
        PairHead pairHead = pairs instanceof java.util.Map && bundleAssets.exists("pair_head.safetensors")
                ? PairHead.load(bundle) : null;
        Catalog catalog = Catalog.load(new AssetSource(context.getAssets(), CATALOG_DIR), bundle);
        return new SearchEngine(bundle, catalog, onnx, java, pairHead, (System.nanoTime() - t0) / 1e6);
    }

    /** Both sentences through the ONNX encoder, then the pair head: its task score, rank key and (binary) decision. */
    PairResult compare(String a, String b) {
        long t0 = System.nanoTime();
        float[] u = onnx.encode(a).embedding;
        float[] v = onnx.encode(b).embedding;
        float[] logits = pairHead.logits(u, v);
        Boolean decision = "binary".equals(pairHead.kind) ? pairHead.decide(logits, u, v) : null;
        return new PairResult(pairHead.score(logits), pairHead.key(logits, u, v), decision, (System.nanoTime() - t0) / 1e6);
    }

    Result search(String text, boolean useJava, int k) {
        Encoder encoder = useJava && java != null ? java : onnx;
        long t0 = System.nanoTime();
        Encoder.Encoding e = encoder.encode(text);
        long t1 = System.nanoTime();
        HammingIndex.Hits hits = catalog.index.topK(e.code, k);
        long t2 = System.nanoTime();
        List<Hit> out = new ArrayList<Hit>(hits.size());
        for (int i = 0; i < hits.size(); i++) {
            out.add(new Hit(hits.ids[i], hits.distances[i], catalog.sentences.get(hits.ids[i])));
        }
        return new Result(out, e.ids.length, (t1 - t0) / 1e6, (t2 - t1) / 1e6, encoder.name());
    }

    String describe() {
        return String.format(Locale.ROOT, "%d-d, %d-bit codes, %s · catalog %,d sentences · loaded in %.0f ms",
                bundle.dim(), bundle.bits(), bundle.precision(), catalog.size(), loadMs);
    }

    @Override
    public void close() {
        onnx.close();
        if (java != null) {
            java.close();
        }
    }
}
