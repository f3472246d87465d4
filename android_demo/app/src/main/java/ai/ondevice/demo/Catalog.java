package ai.ondevice.demo;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import ai.ondevice.core.Bundle;
import ai.ondevice.core.BundleException;
import ai.ondevice.core.FileSource;
import ai.ondevice.core.HammingIndex;
import ai.ondevice.core.Json;
import ai.ondevice.core.Npy;

/**
 * The searchable catalog shipped in {@code assets/catalog/} (written by {@code tools/make_catalog.py}):
 * {@code sentences.jsonl} (one JSON string per line), {@code codes.npy} (uint8 [n, code_bytes], row i = sentence i)
 * and {@code catalog.json} (count, code_bytes, and the sha256 of the encoder the codes were made with).
 */
final class Catalog {
    final List<String> sentences;
    final HammingIndex index;

    private Catalog(List<String> sentences, HammingIndex index) {
        this.sentences = sentences;
        this.index = index;
    }

    int size() {
        return sentences.size();
    }

    static Catalog load(AssetSource assets, Bundle bundle) throws IOException {
        if (!assets.exists("codes.npy") || !assets.exists("sentences.jsonl")) {
            throw new BundleException("no catalog in assets/catalog (codes.npy + sentences.jsonl); "
                    + "run android_demo/tools/make_catalog.py (see README)");
        }
        Object madeWith = null;
        if (assets.exists("catalog.json")) {
            Map<String, Object> info = Json.parseObject(
                    new String(FileSource.readAll(assets.open("catalog.json")), StandardCharsets.UTF_8), "catalog.json");
            madeWith = info.get("encoder_sha256");
        }
        Map<String, Object> files = Json.getObject(bundle.manifest(), "files", "manifest.json");
        Object encoder = files.get("encoder.onnx") instanceof Map
                ? ((Map<?, ?>) files.get("encoder.onnx")).get("sha256") : null;
        if (madeWith != null && encoder != null && !madeWith.equals(encoder)) {
            throw new BundleException("the catalog's codes were made with another bundle; "
                    + "re-run tools/make_catalog.py with the bundle in assets/bundle");
        }
        Npy codes = Npy.parse(FileSource.readAll(assets.open("codes.npy")), "catalog/codes.npy");
        if (codes.shape.length != 2 || codes.cols() != bundle.codeBytes()) {
            throw new BundleException("catalog/codes.npy rows have " + codes.cols() + " bytes, the bundle's codes have "
                    + bundle.codeBytes() + "; rebuild the catalog with this bundle");
        }
        List<String> sentences = new ArrayList<String>(codes.rows());
        String text = new String(FileSource.readAll(assets.open("sentences.jsonl")), StandardCharsets.UTF_8);
        for (String line : text.split("\n")) {
            if (!line.trim().isEmpty()) {
                Object s = Json.parse(line);
                sentences.add(s instanceof String ? (String) s : String.valueOf(s));
            }
        }
        if (sentences.size() != codes.rows()) {
            throw new BundleException("catalog has " + sentences.size() + " sentences but " + codes.rows() + " codes");
        }
        return new Catalog(sentences, new HammingIndex(codes.bytes(), bundle.codeBytes()));
    }
}
