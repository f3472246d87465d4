package ai.ondevice.core;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * An exported ondevice bundle: reads manifest.json, checks its format and version, and verifies every listed
 * file's size and SHA-256 before anything is used. Every failure is a {@link BundleException} with a one-line
 * message.
 *
 * <pre>
 * Bundle b = Bundle.open(FileSource.directory(new File("bundle")));
 * Encoder enc = JavaEncoder.fromBundle(b);      // needs student.safetensors (export --with-weights)
 * </pre>
 */
public final class Bundle {
    public static final String FORMAT = "ondevice-bundle";
    public static final int FORMAT_VERSION = 1;
    public static final String MANIFEST = "manifest.json";

    /** One manifest entry: expected size and checksum. */
    public static final class FileEntry {
        public final String name;
        public final long bytes;
        public final String sha256;

        FileEntry(String name, long bytes, String sha256) {
            this.name = name;
            this.bytes = bytes;
            this.sha256 = sha256;
        }
    }

    private final FileSource source;
    private final Map<String, Object> manifest;
    private final Map<String, FileEntry> files;
    private final int dim;
    private final int bits;
    private final int codeBytes;

    private Bundle(FileSource source, Map<String, Object> manifest, Map<String, FileEntry> files) {
        this.source = source;
        this.manifest = manifest;
        this.files = files;
        String what = "manifest.json";
        this.dim = (int) Json.getLong(manifest, "dim", what);
        this.bits = (int) Json.getLong(manifest, "bits", what);
        this.codeBytes = (int) Json.getLong(manifest, "code_bytes", what);
        String order = Json.getString(manifest, "bit_order", what);
        if (!"little".equals(order)) {
            throw new BundleException("manifest.json: bit_order \"" + order + "\" is not supported (this core reads \"little\")");
        }
        if (codeBytes != Codes.codeBytes(bits) || dim < 1 || bits < 1) {
            throw new BundleException("manifest.json: code_bytes " + codeBytes + " does not fit " + bits + " bits (dim " + dim + ")");
        }
    }

    /** Opens and fully verifies a bundle. */
    public static Bundle open(FileSource source) {
        return open(source, true);
    }

    /**
     * Opens a bundle; with {@code verify} every file in the manifest is checked (size and SHA-256) now.
     * Without it, files are still checked one by one when {@link #read} loads them.
     */
    @SuppressWarnings("unchecked")
    public static Bundle open(FileSource source, boolean verify) {
        byte[] raw;
        try {
            raw = FileSource.readAll(source.open(MANIFEST));
        } catch (FileNotFoundException e) {
            throw new BundleException(source.describe() + " is not an ondevice bundle: manifest.json is missing; run `ondevice export`");
        } catch (IOException e) {
            throw new BundleException("cannot read manifest.json in " + source.describe() + ": " + e.getMessage());
        }
        Map<String, Object> m = Json.parseObject(new String(raw, StandardCharsets.UTF_8), "manifest.json");
        Object format = m.get("format");
        if (!FORMAT.equals(format)) {
            throw new BundleException("manifest.json: format is " + Json.describe(format) + ", expected \"" + FORMAT + "\"");
        }
        long version = Json.getLong(m, "format_version", "manifest.json");
        if (version != FORMAT_VERSION) {
            throw new BundleException("bundle format_version " + version + " is not supported (this core reads version "
                    + FORMAT_VERSION + "); re-export with a matching ondevice or update the app");
        }
        Map<String, Object> listed = Json.getObject(m, "files", "manifest.json");
        Map<String, FileEntry> files = new LinkedHashMap<String, FileEntry>();
        for (Map.Entry<String, Object> e : listed.entrySet()) {
            String name = e.getKey();
            if (name.isEmpty() || name.startsWith("/") || name.contains("\\") || ("/" + name + "/").contains("/../")
                    || ("/" + name + "/").contains("/./") || MANIFEST.equals(name)) {
                throw new BundleException("manifest.json lists an invalid file name \"" + name + "\"");
            }
            if (!(e.getValue() instanceof Map)) {
                throw new BundleException("manifest.json: entry for " + name + " is not an object");
            }
            Map<String, Object> info = (Map<String, Object>) e.getValue();
            String sha = Json.getString(info, "sha256", "manifest.json entry " + name).toLowerCase(java.util.Locale.ROOT);
            if (!sha.matches("[0-9a-f]{64}")) {
                throw new BundleException("manifest.json: entry for " + name + " has a malformed sha256");
            }
            files.put(name, new FileEntry(name, Json.getLong(info, "bytes", "manifest.json entry " + name), sha));
        }
        Bundle b = new Bundle(source, m, files);
        if (verify) {
            for (String name : files.keySet()) {
                b.read(name);
            }
        }
        return b;
    }

    /** Reads a manifest-listed file, verifying its size and SHA-256. */
    public byte[] read(String name) {
        FileEntry entry = files.get(name);
        if (entry == null) {
            throw new BundleException("bundle " + source.describe() + " does not list " + name + " in manifest.json"
                    + ("student.safetensors".equals(name) ? "; re-export with `ondevice export --with-weights`" : "")
                    + (name.startsWith("golden/") ? "; re-export with `ondevice export --golden`" : ""));
        }
        byte[] data;
        try {
            data = FileSource.readAll(source.open(name));
        } catch (FileNotFoundException e) {
            throw new BundleException("bundle file " + name + " is missing from " + source.describe() + "; copy the whole bundle again");
        } catch (IOException e) {
            throw new BundleException("cannot read bundle file " + name + ": " + e.getMessage());
        }
        if (data.length != entry.bytes) {
            throw new BundleException("bundle file " + name + " has " + data.length + " bytes, manifest says " + entry.bytes
                    + "; the file is truncated or modified, copy the bundle again");
        }
        String actual = sha256Hex(data);
        if (!actual.equals(entry.sha256)) {
            throw new BundleException("checksum mismatch for bundle file " + name + " (sha256 " + actual.substring(0, 12)
                    + "..., manifest says " + entry.sha256.substring(0, 12) + "...); the file is corrupt or modified, copy the bundle again");
        }
        return data;
    }

    public static String sha256Hex(byte[] data) {
        MessageDigest md;
        try {
            md = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        byte[] d = md.digest(data);
        StringBuilder sb = new StringBuilder(64);
        for (byte x : d) {
            sb.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        }
        return sb.toString();
    }

    public boolean has(String name) {
        return files.containsKey(name);
    }

    public List<String> fileNames() {
        return Collections.unmodifiableList(new ArrayList<String>(files.keySet()));
    }

    public Map<String, Object> manifest() {
        return Collections.unmodifiableMap(manifest);
    }

    public int dim() {
        return dim;
    }

    public int bits() {
        return bits;
    }

    public int codeBytes() {
        return codeBytes;
    }

    public String precision() {
        Object p = manifest.get("precision");
        return p instanceof String ? (String) p : "fp32";
    }

    public String describe() {
        return source.describe();
    }

    /** The tokenizer from vocab.txt and tokenizer.json, with the spec version checked. */
    public Tokenizer tokenizer() {
        Map<String, Object> spec = Json.parseObject(new String(read("tokenizer.json"), StandardCharsets.UTF_8), "tokenizer.json");
        long version = Json.getLong(spec, "version", "tokenizer.json");
        if (version != Tokenizer.SPEC_VERSION) {
            throw new BundleException("tokenizer spec version " + version + " is not supported (this core implements version "
                    + Tokenizer.SPEC_VERSION + "); update the app");
        }
        if (Json.getLong(spec, "pad_id", "tokenizer.json") != Tokenizer.PAD_ID || Json.getLong(spec, "unk_id", "tokenizer.json") != Tokenizer.UNK_ID) {
            throw new BundleException("tokenizer.json: pad_id/unk_id must be 0/1");
        }
        return new Tokenizer(Tokenizer.parseVocab(read("vocab.txt")), (int) Json.getLong(spec, "max_tokens", "tokenizer.json"));
    }

    public Student.Config studentConfig() {
        return Student.Config.fromJson(Json.getObject(manifest, "student", "manifest.json"));
    }

    /** The pure-Java student (needs student.safetensors: export with --with-weights). */
    public Student student() {
        Student.Config cfg = studentConfig();
        if (cfg.outputDim != dim) {
            throw new BundleException("manifest.json: student output_dim " + cfg.outputDim + " != dim " + dim);
        }
        return new Student(cfg, SafeTensors.parse(read("student.safetensors"), "student.safetensors"));
    }

    public Binarizer binarizer() {
        return Binarizer.fromSafeTensors(SafeTensors.parse(read("binarizer.safetensors"), "binarizer.safetensors"), dim, bits);
    }

    /** A listed .npy file (e.g. "golden/codes.npy"). */
    public Npy npy(String name) {
        return Npy.parse(read(name), name);
    }

    /** Opens a raw stream for files too large to hold twice (e.g. handing encoder.onnx to ONNX Runtime). */
    public InputStream openUnverified(String name) throws IOException {
        return source.open(name);
    }
}
