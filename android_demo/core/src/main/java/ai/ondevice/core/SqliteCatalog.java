package ai.ondevice.core;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A SQLite catalog as Python's {@code ondevice.sqlite_catalog} writes it, read into a {@link HammingIndex}: codes
 * (sqlite-vec {@code bit[N]} blobs), ids, int8 vectors + per-row scales (when the catalog keeps them), tag masks,
 * categories and text. Rows are read in id order, as {@code Catalog.to_index()} does, so searches return the same ids,
 * distances and scores as Python, ties included.
 *
 * <p>The reader needs only {@link Database}: {@link #read(Connection)} adapts any JDBC connection (sqlite-jdbc in the
 * tests); on Android an adapter of a few lines over {@code SQLiteDatabase.rawQuery}'s {@code Cursor} (same getters,
 * columns from 0) reads the file with the platform's own SQLite. Every value is checked: a catalog that is not one,
 * or is corrupt, is a {@link BundleException} with a one-line message.
 */
public final class SqliteCatalog {
    public static final String FORMAT = "ondevice-sqlite-catalog-1";
    static final int MAX_BITS = 1 << 16;
    static final int MAX_VECTOR_DIM = 1 << 14;

    /** The rows of one query, columns numbered from 0 (as Android's {@code Cursor}). */
    public interface Rows {
        boolean next();

        boolean isNull(int column);

        long getLong(int column);

        double getDouble(int column);

        byte[] getBlob(int column);

        String getString(int column);

        void close();
    }

    /** Runs one read-only SELECT. */
    public interface Database {
        Rows query(String sql);
    }

    /** Search results: catalog ids, index rows, Hamming distances and (with rescoring) int8 scores, best first. */
    public static final class Hits {
        public final long[] ids;
        public final int[] rows;
        public final int[] distances;
        /** The int8 dot products with the query vector, or null without rescoring. */
        public final float[] scores;

        Hits(long[] ids, int[] rows, int[] distances, float[] scores) {
            this.ids = ids;
            this.rows = rows;
            this.distances = distances;
            this.scores = scores;
        }

        public int size() {
            return ids.length;
        }
    }

    public final int bits;
    public final int codeBytes;
    /** Dimensions of the int8 vectors, 0 when the catalog keeps none. */
    public final int vectorDim;
    public final String table;
    /** The change counter when read (every committed add, remove or update increments it). */
    public final long rev;
    /** The encoder identity as the JSON text Python stored ("null" when none was recorded). */
    public final String encoderJson;
    /** Catalog id of each index row, ascending. */
    public final long[] ids;
    /** Text of each row (null where none was stored). */
    public final List<String> texts;
    public final long[] tags;
    public final int[] categories;
    public final HammingIndex index;

    private SqliteCatalog(Map<String, String> meta, String table, long[] ids, List<String> texts, byte[] codes,
                          long[] tags, int[] categories, byte[] vectors, float[] scales, int bits, int vectorDim) {
        this.bits = bits;
        this.codeBytes = Codes.codeBytes(bits);
        this.vectorDim = vectorDim;
        this.table = table;
        this.rev = parseLong(meta.get("rev"), "rev");
        String enc = meta.get("encoder");
        this.encoderJson = enc == null ? "null" : enc;
        this.ids = ids;
        this.texts = Collections.unmodifiableList(texts);
        this.tags = tags;
        this.categories = categories;
        this.index = new HammingIndex(codes, codeBytes);
        index.setAttributes(tags, categories);
        if (vectorDim > 0 && ids.length > 0) {
            index.setVectors(vectors, scales, vectorDim);
        }
    }

    public int size() {
        return ids.length;
    }

    /**
     * Reads the catalog through a JDBC connection (e.g. {@code jdbc:sqlite:notes.db}) in one read transaction, so
     * the rows and the change counter come from one committed state; the caller closes the connection.
     */
    public static SqliteCatalog read(final Connection db) {
        boolean auto;
        try {
            auto = db.getAutoCommit();
            db.setAutoCommit(false);
        } catch (SQLException e) {
            throw new BundleException("SQLite catalog: cannot start a read transaction (" + oneLine(e) + ")", e);
        }
        SqliteCatalog out;
        try {
            out = read(new Database() {
                @Override
                public Rows query(String sql) {
                    try {
                        return jdbcRows(db.createStatement(), sql);
                    } catch (SQLException e) {
                        throw new BundleException("SQLite catalog: query failed (" + oneLine(e) + ")", e);
                    }
                }
            });
        } catch (RuntimeException e) {
            try {
                endRead(db, auto);
            } catch (SQLException again) {
                e.addSuppressed(again);
            }
            throw e;
        }
        try {
            endRead(db, auto);
        } catch (SQLException e) {
            throw new BundleException("SQLite catalog: cannot end the read transaction (" + oneLine(e) + ")", e);
        }
        return out;
    }

    private static void endRead(Connection db, boolean auto) throws SQLException {
        db.rollback(); // nothing was written: this ends the read transaction
        db.setAutoCommit(auto);
    }

    private static Rows jdbcRows(final Statement st, String sql) throws SQLException {
        final ResultSet rs;
        try {
            rs = st.executeQuery(sql);
        } catch (SQLException e) {
            st.close();
            throw e;
        }
        return new Rows() {
            @Override
            public boolean next() {
                try {
                    return rs.next();
                } catch (SQLException e) {
                    throw fail(e);
                }
            }

            @Override
            public boolean isNull(int column) {
                try {
                    rs.getObject(column + 1);
                    return rs.wasNull();
                } catch (SQLException e) {
                    throw fail(e);
                }
            }

            @Override
            public long getLong(int column) {
                try {
                    return rs.getLong(column + 1);
                } catch (SQLException e) {
                    throw fail(e);
                }
            }

            @Override
            public double getDouble(int column) {
                try {
                    return rs.getDouble(column + 1);
                } catch (SQLException e) {
                    throw fail(e);
                }
            }

            @Override
            public byte[] getBlob(int column) {
                try {
                    return rs.getBytes(column + 1);
                } catch (SQLException e) {
                    throw fail(e);
                }
            }

            @Override
            public String getString(int column) {
                try {
                    return rs.getString(column + 1);
                } catch (SQLException e) {
                    throw fail(e);
                }
            }

            @Override
            public void close() {
                try {
                    rs.close();
                    st.close();
                } catch (SQLException e) {
                    throw fail(e);
                }
            }
        };
    }

    private static BundleException fail(SQLException e) {
        return new BundleException("SQLite catalog: reading failed (" + oneLine(e) + ")", e);
    }

    private static String oneLine(Exception e) {
        String m = String.valueOf(e.getMessage());
        int nl = m.indexOf('\n');
        return nl < 0 ? m : m.substring(0, nl);
    }

    private static long parseLong(String value, String key) {
        try {
            return Long.parseLong(value == null ? "" : value.trim());
        } catch (NumberFormatException e) {
            throw new BundleException("SQLite catalog: metadata '" + key + "' is not an integer (" + value
                    + "); recreate the catalog");
        }
    }

    private static boolean validName(String table) {
        if (table == null || table.isEmpty() || Character.isDigit(table.charAt(0)) || table.startsWith("ondevice_")) {
            return false;
        }
        for (int i = 0; i < table.length(); i++) {
            char c = table.charAt(i);
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
                return false;
            }
        }
        return true;
    }

    /** Reads every row (id order) through {@code db}; one consistent snapshot when the caller wraps it in a read
     * transaction (Python's writer commits each batch as one transaction, so a reader never sees half a batch). */
    public static SqliteCatalog read(Database db) {
        Map<String, String> meta = new HashMap<>();
        Rows m;
        try {
            m = db.query("SELECT key, value FROM ondevice_catalog");
        } catch (BundleException e) {
            throw new BundleException("not an ondevice SQLite catalog (no ondevice_catalog table): " + e.getMessage(), e);
        }
        try {
            while (m.next()) {
                meta.put(m.getString(0), m.getString(1));
            }
        } finally {
            m.close();
        }
        if (!FORMAT.equals(meta.get("format"))) {
            throw new BundleException("not an ondevice SQLite catalog (format " + meta.get("format") + ", expected "
                    + FORMAT + ")");
        }
        long bitsL = parseLong(meta.get("bits"), "bits");
        long dimL = parseLong(meta.containsKey("vector_dim") ? meta.get("vector_dim") : "0", "vector_dim");
        if (bitsL < 1 || bitsL > MAX_BITS || dimL < 0 || dimL > MAX_VECTOR_DIM) {
            throw new BundleException("SQLite catalog metadata out of range (bits " + bitsL + ", vector_dim " + dimL
                    + "); recreate the catalog");
        }
        int bits = (int) bitsL;
        int dim = (int) dimL;
        String table = meta.get("table");
        if (!validName(table)) {
            throw new BundleException("SQLite catalog names no valid items table (" + table + ")");
        }
        int nb = Codes.codeBytes(bits);
        List<Long> ids = new ArrayList<>();
        List<String> texts = new ArrayList<>();
        List<Long> tags = new ArrayList<>();
        List<Integer> cats = new ArrayList<>();
        java.io.ByteArrayOutputStream codes = new java.io.ByteArrayOutputStream();
        java.io.ByteArrayOutputStream vectors = new java.io.ByteArrayOutputStream();
        List<Float> scales = new ArrayList<>();
        Rows r = db.query("SELECT id, code, vector, scale, tags, category, text FROM " + table + " ORDER BY id");
        try {
            while (r.next()) {
                long id = r.getLong(0);
                byte[] code = r.isNull(1) ? null : r.getBlob(1);
                if (code == null || code.length != nb) {
                    throw new BundleException("SQLite catalog: id " + id + " has a code that is not " + nb
                            + " bytes; the catalog is corrupt");
                }
                codes.write(code, 0, nb);
                if (dim > 0) {
                    byte[] v = r.isNull(2) ? null : r.getBlob(2);
                    double s = r.isNull(3) ? Double.NaN : r.getDouble(3);
                    if (v == null || v.length != dim || !(s >= 0) || Double.isInfinite(s)) {
                        throw new BundleException("SQLite catalog: id " + id + " has no valid int8 vector of " + dim
                                + " values with a finite scale >= 0; the catalog is corrupt");
                    }
                    vectors.write(v, 0, dim);
                    scales.add((float) s);
                }
                long category = r.getLong(5);
                if (category < Integer.MIN_VALUE || category > Integer.MAX_VALUE) {
                    throw new BundleException("SQLite catalog: id " + id + " has a category outside 32 bits");
                }
                ids.add(id);
                tags.add(r.getLong(4)); // the uint64 mask as the int64 with the same bits
                cats.add((int) category);
                texts.add(r.isNull(6) ? null : r.getString(6));
            }
        } finally {
            r.close();
        }
        int n = ids.size();
        long[] idArr = new long[n];
        long[] tagArr = new long[n];
        int[] catArr = new int[n];
        float[] scaleArr = new float[dim > 0 ? n : 0];
        for (int i = 0; i < n; i++) {
            idArr[i] = ids.get(i);
            tagArr[i] = tags.get(i);
            catArr[i] = cats.get(i);
            if (dim > 0) {
                scaleArr[i] = scales.get(i);
            }
        }
        return new SqliteCatalog(meta, table, idArr, texts, codes.toByteArray(), tagArr, catArr,
                vectors.toByteArray(), scaleArr, bits, dim);
    }

    /**
     * Top-k by Hamming distance with an optional filter (null: none) and int8 rescoring ({@code rescore} = m >= 1
     * re-ranks the Hamming top m*k by the int8 dot product with {@code queryVector}; 0: off), as Python's
     * {@code Catalog.to_index().search(...)}: the same ids, distances and scores.
     */
    public Hits search(byte[] query, int k, Filter filter, int rescore, float[] queryVector) {
        if (query.length != codeBytes) {
            throw new IllegalArgumentException("query has " + query.length + " bytes, the catalog's codes " + codeBytes);
        }
        if (rescore > 0 && vectorDim == 0) {
            throw new IllegalArgumentException("this catalog keeps no int8 vectors to rescore with");
        }
        if (size() == 0) {
            return new Hits(new long[0], new int[0], new int[0], rescore > 0 ? new float[0] : null);
        }
        HammingIndex.Hits h = index.search(query, k, filter, rescore, queryVector);
        long[] out = new long[h.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ids[h.ids[i]];
        }
        return new Hits(out, h.ids, h.distances, h.scores);
    }

    /** The stored text of a search hit's row (null where none was stored). */
    public String text(int row) {
        return texts.get(row);
    }
}
