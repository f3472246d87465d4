package ai.ondevice.core;

import java.io.File;
import java.util.Locale;

/**
 * The Android app's DiPair search on its assets, on the JVM: {@link Catalog#load} (every file checked against
 * catalog.json), the Hamming top {@code SHORTLIST} of a query's packed code, then {@link DiPairHead#rerank} of those
 * rows over the catalog's int8 token states. The query's side-a states and code come from Python (.npy files), as the
 * app's ONNX encoder would give them. Prints key=value lines; a bad catalog prints one line and exits 2:
 *
 * <pre>java -cp build ai.ondevice.core.CatalogRerankCheck BUNDLE_DIR CATALOG_DIR QUERY_STATES_A.npy QUERY_CODE.npy [SHORTLIST]</pre>
 */
public final class CatalogRerankCheck {
    private CatalogRerankCheck() {
    }

    public static void main(String[] args) throws Exception {
        Bundle bundle = Bundle.open(FileSource.directory(new File(args[0])), false); // files checked as read, as the app
        Catalog catalog;
        try {
            catalog = Catalog.load(FileSource.directory(new File(args[1])), bundle);
        } catch (BundleException e) {
            System.err.println("error: " + e.getMessage());
            System.exit(2);
            return;
        }
        System.out.println("count=" + catalog.size());
        System.out.println("dipair_states=" + (catalog.dipairStates == null ? 0 : catalog.dipairStates.length));
        float[] statesA = Npy.parse(FileSource.readAll(new java.io.FileInputStream(args[2])), args[2]).floats();
        byte[] code = Npy.parse(FileSource.readAll(new java.io.FileInputStream(args[3])), args[3]).bytes();
        int shortlist = args.length > 4 ? Integer.parseInt(args[4]) : 100;
        DiPairHead head = DiPairHead.load(bundle);
        HammingIndex.Hits hits = catalog.index.topK(code, shortlist);
        double[] keys = new double[hits.ids.length];
        int[] top = head.rerank(statesA, hits.ids, hits.distances, catalog.dipairStates, 10, keys);
        StringBuilder rows = new StringBuilder();
        StringBuilder topKeys = new StringBuilder();
        for (int i = 0; i < top.length; i++) {
            rows.append(i > 0 ? "," : "").append(hits.ids[top[i]]);
            topKeys.append(i > 0 ? "," : "").append(String.format(Locale.ROOT, "%.6f", keys[top[i]]));
        }
        System.out.println("rerank_top10=" + rows);
        System.out.println("rerank_top10_keys=" + topKeys);
        // the app's two-sentence comparison of the query with the top row: task score and key of the head's logits
        int best = hits.ids[top[0]];
        float[] row = new float[head.m * head.d];
        for (int j = 0; j < row.length; j++) {
            row[j] = catalog.dipairStates[best * row.length + j] / 127f;
        }
        float[] logits = head.logits(statesA, row);
        System.out.println(String.format(Locale.ROOT, "top1_score=%.6f", head.score(logits)));
        System.out.println(String.format(Locale.ROOT, "top1_key=%.6f", head.key(logits, hits.distances[top[0]])));
    }
}
