package ai.ondevice.core;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * The Java core reads a SQLite catalog written by Python (tests/test_sqlite_catalog_apps.py) through JDBC and searches
 * it: {@code java -cp classes:sqlite-jdbc.jar ai.ondevice.core.SqliteCatalogCheck CATALOG.db GOLDEN.json OUT.json}
 * writes the catalog's size, ids, texts and every case's ids, distances and scores, which the Python test compares
 * with its own.
 */
public final class SqliteCatalogCheck {
    private SqliteCatalogCheck() {
    }

    private static List<?> list(Object o) {
        return (List<?>) o;
    }

    private static byte[] code(List<?> row) {
        byte[] out = new byte[row.size()];
        for (int j = 0; j < out.length; j++) {
            out[j] = (byte) ((Long) row.get(j) & 0xff);
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

    private static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws IOException, SQLException {
        SqliteCatalog cat;
        try (Connection db = DriverManager.getConnection("jdbc:sqlite:" + args[0])) {
            cat = SqliteCatalog.read(db);
        }
        Map<String, Object> g = Json.parseObject(new String(Files.readAllBytes(Paths.get(args[1])),
                StandardCharsets.UTF_8), "golden file");
        List<?> queries = list(g.get("queries"));
        List<?> queryVectors = list(g.get("query_vectors"));
        StringBuilder out = new StringBuilder("{\"size\": ").append(cat.size()).append(", \"bits\": ").append(cat.bits)
                .append(", \"vector_dim\": ").append(cat.vectorDim).append(", \"rev\": ").append(cat.rev)
                .append(", \"ids\": ").append(Arrays.toString(cat.ids)).append(", \"texts\": [");
        for (int i = 0; i < cat.size(); i++) {
            out.append(i == 0 ? "" : ",").append(quote(cat.text(i)));
        }
        out.append("], \"cases\": [");
        List<?> cases = list(g.get("cases"));
        for (int c = 0; c < cases.size(); c++) {
            @SuppressWarnings("unchecked")
            Map<String, Object> spec = (Map<String, Object>) cases.get(c);
            Filter filter = SearchAppsCheck.filterOf(spec);
            int k = (int) Json.getLong(spec, "k", "case");
            int rescore = (int) Json.getLong(spec, "rescore", "case");
            StringBuilder ids = new StringBuilder();
            StringBuilder dists = new StringBuilder();
            StringBuilder scores = new StringBuilder();
            for (int q = 0; q < queries.size(); q++) {
                SqliteCatalog.Hits hits = cat.search(code(list(queries.get(q))), k, filter, rescore,
                        floats(list(queryVectors.get(q))));
                ids.append(q == 0 ? "" : ",").append(Arrays.toString(hits.ids));
                dists.append(q == 0 ? "" : ",").append(Arrays.toString(hits.distances));
                scores.append(q == 0 ? "" : ",").append(hits.scores == null ? "null" : Arrays.toString(hits.scores));
            }
            out.append(c == 0 ? "" : ",").append("{\"ids\": [").append(ids).append("], \"distances\": [").append(dists)
                    .append("], \"scores\": [").append(scores).append("]}");
        }
        out.append("]}");
        Files.write(Paths.get(args[2]), out.toString().getBytes(StandardCharsets.UTF_8));
    }
}
