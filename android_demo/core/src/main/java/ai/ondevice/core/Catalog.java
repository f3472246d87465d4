package ai.ondevice.core;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * A searchable catalog as {@code ondevice/catalog.py} writes it (the apps' {@code tools/make_catalog.py}):
 * {@code catalog.json} (count, code_bytes, bits, the sha256 of the encoder.onnx that made the codes, and the size and
 * sha256 of every file below), {@code sentences.jsonl} (one JSON string per line, row i), {@code codes.npy} (uint8
 * [count, code_bytes]) and, for a DiPair bundle, {@code dipair_states.npy} (int8 [count, M, D]: every sentence's
 * side-b token states, round(127 x), what {@link DiPairHead#rerank(float[], int[], int[], byte[], int, double[])}
 * reads). Every file is checked against catalog.json as it is read, as the bundle's files against manifest.json.
 */
public final class Catalog {
    public final List<String> sentences;
    public final HammingIndex index;
    /** The DiPair token-state cache (count x M x D int8), or null when the catalog has none. */
    public final byte[] dipairStates;

    private Catalog(List<String> sentences, HammingIndex index, byte[] dipairStates) {
        this.sentences = Collections.unmodifiableList(sentences);
        this.index = index;
        this.dipairStates = dipairStates;
    }

    public int size() {
        return sentences.size();
    }

    /** Reads and verifies the catalog in {@code files} for {@code bundle}; throws {@link BundleException} (one line). */
    public static Catalog load(FileSource files, Bundle bundle) {
        Map<String, Object> info = Json.parseObject(
                new String(read(files, "catalog.json"), StandardCharsets.UTF_8), "catalog.json");
        Object listed = info.get("files");
        if (!(listed instanceof Map)) {
            throw new BundleException("catalog.json lists no file checksums (a catalog from before they were written); "
                    + "rebuild it with tools/make_catalog.py");
        }
        Map<String, Object> bundleFiles = Json.getObject(bundle.manifest(), "files", "manifest.json");
        Object encoder = bundleFiles.get("encoder.onnx") instanceof Map
                ? ((Map<?, ?>) bundleFiles.get("encoder.onnx")).get("sha256") : null;
        Object madeWith = info.get("encoder_sha256");
        if (madeWith == null || !madeWith.equals(encoder)) {
            throw new BundleException("the catalog's codes were made with another bundle's encoder; "
                    + "re-run tools/make_catalog.py with this bundle");
        }
        Npy codes = Npy.parse(verified(files, (Map<?, ?>) listed, "codes.npy"), "catalog/codes.npy");
        if (codes.shape.length != 2 || codes.cols() != bundle.codeBytes()) {
            throw new BundleException("catalog/codes.npy rows have " + codes.cols() + " bytes, the bundle's codes have "
                    + bundle.codeBytes() + "; rebuild the catalog with this bundle");
        }
        List<String> sentences = new ArrayList<String>(codes.rows());
        String text = new String(verified(files, (Map<?, ?>) listed, "sentences.jsonl"), StandardCharsets.UTF_8);
        for (String line : text.split("\n")) {
            if (!line.trim().isEmpty()) {
                Object s = Json.parse(line);
                sentences.add(s instanceof String ? (String) s : String.valueOf(s));
            }
        }
        if (sentences.size() != codes.rows()) {
            throw new BundleException("catalog has " + sentences.size() + " sentences but " + codes.rows() + " codes");
        }
        byte[] states = null;
        if (info.get("dipair_states") != null) {
            states = dipairStates(files, (Map<?, ?>) listed, bundle, codes.rows());
        }
        return new Catalog(sentences, new HammingIndex(codes.bytes(), bundle.codeBytes()), states);
    }

    private static byte[] dipairStates(FileSource files, Map<?, ?> listed, Bundle bundle, int count) {
        Object block = bundle.manifest().get("dipair");
        Object head = block instanceof Map ? ((Map<?, ?>) block).get("head") : null;
        if (!(head instanceof Map)) {
            throw new BundleException("the catalog caches DiPair token states but the bundle has no DiPair head; "
                    + "rebuild the catalog with this bundle");
        }
        long m = ((Number) ((Map<?, ?>) head).get("m")).longValue();
        long d = ((Number) ((Map<?, ?>) head).get("d")).longValue();
        Npy states = Npy.parse(verified(files, listed, "dipair_states.npy"), "catalog/dipair_states.npy");
        if (!"|i1".equals(states.dtype) || states.shape.length != 3 || states.shape[0] != count || states.shape[1] != m
                || states.shape[2] != d) {
            throw new BundleException("catalog/dipair_states.npy is not int8 [" + count + ", " + m + ", " + d
                    + "] for this bundle's DiPair head; rebuild the catalog with this bundle");
        }
        return states.int8();
    }

    /** {@code name}'s bytes after checking them against its catalog.json entry (size and sha256). */
    private static byte[] verified(FileSource files, Map<?, ?> listed, String name) {
        Object entry = listed.get(name);
        if (!(entry instanceof Map) || !(((Map<?, ?>) entry).get("sha256") instanceof String)
                || !(((Map<?, ?>) entry).get("bytes") instanceof Number)) {
            throw new BundleException("catalog.json does not list " + name + " with its size and sha256; "
                    + "rebuild the catalog with tools/make_catalog.py");
        }
        long bytes = ((Number) ((Map<?, ?>) entry).get("bytes")).longValue();
        String sha = (String) ((Map<?, ?>) entry).get("sha256");
        byte[] data = read(files, name);
        if (data.length != bytes || !Bundle.sha256Hex(data).equals(sha.toLowerCase(java.util.Locale.ROOT))) {
            throw new BundleException("catalog file " + name + " does not match catalog.json (size or sha256); "
                    + "it is corrupt or modified, copy the catalog again");
        }
        return data;
    }

    private static byte[] read(FileSource files, String name) {
        try {
            return FileSource.readAll(files.open(name));
        } catch (FileNotFoundException e) {
            throw new BundleException("catalog file " + name + " is missing from " + files.describe()
                    + "; build the catalog with tools/make_catalog.py");
        } catch (IOException e) {
            throw new BundleException("cannot read catalog file " + name + ": " + e.getMessage());
        }
    }
}
