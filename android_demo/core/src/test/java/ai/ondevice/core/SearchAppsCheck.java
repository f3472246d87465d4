package ai.ondevice.core;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;
import java.util.Map;

/**
 * Filters and int8 rescoring of the Java core on a golden file written by Python (tests/test_search_apps.py):
 * {@code java ai.ondevice.core.SearchAppsCheck GOLDEN.json OUT.json} writes every case's ids, distances and scores,
 * which the Python test compares with its own.
 */
public final class SearchAppsCheck {
    private SearchAppsCheck() {
    }

    private static List<?> list(Object o) {
        return (List<?>) o;
    }

    private static byte[] bytes(List<?> rows, boolean signed) {
        int width = list(rows.get(0)).size();
        byte[] out = new byte[rows.size() * width];
        for (int r = 0; r < rows.size(); r++) {
            List<?> row = list(rows.get(r));
            for (int j = 0; j < width; j++) {
                long v = (Long) row.get(j);
                out[r * width + j] = (byte) (signed ? v : (v & 0xff));
            }
        }
        return out;
    }

    private static float[] floats(List<?> values) {
        float[] out = new float[values.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Number) values.get(i)).floatValue();
        }
        return out;
    }

    public static void main(String[] args) throws IOException {
        Map<String, Object> g = Json.parseObject(new String(Files.readAllBytes(Paths.get(args[0])),
                StandardCharsets.UTF_8), "golden file");
        int codeBytes = (int) Json.getLong(g, "code_bytes", "golden");
        int dim = (int) Json.getLong(g, "dim", "golden");
        List<?> codes = list(g.get("codes"));
        HammingIndex index = new HammingIndex(bytes(codes, false), codeBytes);
        List<?> tagText = list(g.get("tags"));
        List<?> cats = list(g.get("categories"));
        long[] tags = new long[tagText.size()];
        int[] categories = new int[cats.size()];
        for (int i = 0; i < tags.length; i++) {
            tags[i] = Long.parseUnsignedLong((String) tagText.get(i));
            categories[i] = (int) (long) (Long) cats.get(i);
        }
        index.setAttributes(tags, categories);
        index.setVectors(bytes(list(g.get("vectors")), true), floats(list(g.get("scales"))), dim);
        List<?> queries = list(g.get("queries"));
        List<?> queryVectors = list(g.get("query_vectors"));
        StringBuilder out = new StringBuilder("{\"cases\": [");
        List<?> cases = list(g.get("cases"));
        for (int c = 0; c < cases.size(); c++) {
            @SuppressWarnings("unchecked")
            Map<String, Object> spec = (Map<String, Object>) cases.get(c);
            Filter filter = filterOf(spec);
            int k = (int) Json.getLong(spec, "k", "case");
            int rescore = (int) Json.getLong(spec, "rescore", "case");
            StringBuilder ids = new StringBuilder();
            StringBuilder dists = new StringBuilder();
            StringBuilder scores = new StringBuilder();
            for (int q = 0; q < queries.size(); q++) {
                byte[] query = bytes(java.util.Collections.singletonList(queries.get(q)), false);
                HammingIndex.Hits hits = index.search(query, k, filter, rescore, floats(list(queryVectors.get(q))));
                ids.append(q == 0 ? "" : ",").append(java.util.Arrays.toString(hits.ids));
                dists.append(q == 0 ? "" : ",").append(java.util.Arrays.toString(hits.distances));
                scores.append(q == 0 ? "" : ",").append(hits.scores == null ? "null" : java.util.Arrays.toString(hits.scores));
            }
            out.append(c == 0 ? "" : ",").append("{\"ids\": [").append(ids).append("], \"distances\": [").append(dists)
                    .append("], \"scores\": [").append(scores).append("]}");
        }
        out.append("]}");
        Files.write(Paths.get(args[1]), out.toString().getBytes(StandardCharsets.UTF_8));
    }

    /** The golden case's filter (null when the case has none): tags as unsigned decimal strings, categories or null. */
    static Filter filterOf(Map<String, Object> spec) {
        if (spec.get("filter") == null) {
            return null;
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> f = (Map<String, Object>) spec.get("filter");
        int[] allowed = null;
        if (f.get("categories") != null) {
            List<?> cl = list(f.get("categories"));
            allowed = new int[cl.size()];
            for (int i = 0; i < allowed.length; i++) {
                allowed[i] = (int) (long) (Long) cl.get(i);
            }
        }
        return new Filter(Long.parseUnsignedLong((String) f.get("tags_all")),
                Long.parseUnsignedLong((String) f.get("tags_any")), allowed);
    }
}
