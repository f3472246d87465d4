package ai.ondevice.core;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;

/**
 * Unit checks of the core that need no JUnit: {@code java -cp build ai.ondevice.core.CoreTests BUNDLE_DIR}.
 * The bundle directory is only copied (into a temporary folder) and never modified. Exits 1 on any failure.
 */
public final class CoreTests {
    private static int passed;
    private static final List<String> FAILED = new ArrayList<String>();

    private interface Check {
        void run() throws Exception;
    }

    private static void check(String name, Check c) {
        try {
            c.run();
            passed++;
        } catch (Throwable t) {
            FAILED.add(name + ": " + t);
        }
    }

    private static void assertTrue(boolean cond, String msg) {
        if (!cond) {
            throw new AssertionError(msg);
        }
    }

    private static void assertEq(Object want, Object got) {
        if (want == null ? got != null : !want.equals(got)) {
            throw new AssertionError("expected <" + want + "> got <" + got + ">");
        }
    }

    /** Runs {@code c}, which must throw a BundleException whose one-line message contains {@code fragment}. */
    private static void assertBundleError(Check c, String fragment) throws Exception {
        try {
            c.run();
        } catch (BundleException e) {
            assertTrue(e.getMessage().contains(fragment), "message <" + e.getMessage() + "> lacks <" + fragment + ">");
            assertTrue(!e.getMessage().contains("\n"), "message is not one line: " + e.getMessage());
            return;
        }
        throw new AssertionError("no BundleException (wanted one mentioning " + fragment + ")");
    }

    /** A safetensors file of one F32 tensor "w" with the given JSON shape and offsets and {@code body} zero bytes. */
    private static byte[] safetensors(String shape, String offsets, int body) {
        byte[] header = ("{\"w\": {\"dtype\": \"F32\", \"shape\": " + shape + ", \"data_offsets\": " + offsets + "}}")
                .getBytes(StandardCharsets.UTF_8);
        byte[] out = new byte[8 + header.length + body];
        java.nio.ByteBuffer.wrap(out, 0, 8).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(header.length);
        System.arraycopy(header, 0, out, 8, header.length);
        return out;
    }

    private static String tokens(String text) {
        return String.join("|", Tokenizer.tokenize(text, 0));
    }

    public static void main(String[] args) throws Exception {
        File bundleArg = null;
        File assetsArg = null;
        for (int i = 0; i < args.length; i++) {
            if ("--assets".equals(args[i]) && i + 1 < args.length) {
                assetsArg = new File(args[++i]);
            } else {
                bundleArg = new File(args[i]);
            }
        }
        final File bundleDir = bundleArg;
        final File assetsDir = assetsArg;

        // ---- tokenizer spec cases (expected values from ondevice/tokenizer.py) --------------------------
        check("float16 widening", () -> {
            // known values by hand, then every positive finite half: strictly increasing with its bits, sign symmetric
            assertEq(1.0f, SafeTensors.halfToFloat((short) 0x3C00));
            assertEq(-2.0f, SafeTensors.halfToFloat((short) 0xC000));
            assertEq(65504.0f, SafeTensors.halfToFloat((short) 0x7BFF));
            assertEq(5.9604645E-8f, SafeTensors.halfToFloat((short) 0x0001));
            assertEq(6.1035156E-5f, SafeTensors.halfToFloat((short) 0x0400));
            assertEq(-0.0f, SafeTensors.halfToFloat((short) 0x8000));
            assertEq(Float.POSITIVE_INFINITY, SafeTensors.halfToFloat((short) 0x7C00));
            assertTrue(Float.isNaN(SafeTensors.halfToFloat((short) 0x7E00)), "0x7E00 is NaN");
            float previous = -1.0f;
            for (int h = 0; h < 0x7C00; h++) { // positive finite halves are strictly increasing with their bits
                float v = SafeTensors.halfToFloat((short) h);
                assertTrue(v > previous || (h == 0 && v == 0f), "half " + h + " -> " + v);
                assertEq(-v, SafeTensors.halfToFloat((short) (h | 0x8000)));
                previous = v;
            }
        });
        check("safetensors shapes and offsets must be whole numbers", () -> {
            assertEq(6, SafeTensors.parse(safetensors("[2, 3]", "[0, 24]", 24), "t").get("w", "t").floats().length);
            assertBundleError(() -> SafeTensors.parse(safetensors("[\"8\"]", "[0, 24]", 24), "t"), "not a number");
            assertBundleError(() -> SafeTensors.parse(safetensors("[2.5, 2]", "[0, 20]", 24), "t"), "not a whole number");
            assertBundleError(() -> SafeTensors.parse(safetensors("[4294967302]", "[0, 24]", 24), "t"), "not a whole number");
            assertBundleError(() -> SafeTensors.parse(safetensors("[65536, 65536, 65536]", "[0, 24]", 24), "t"),
                    "larger than the file");
            assertBundleError(() -> SafeTensors.parse(safetensors("[6]", "[0, 24.5]", 24), "t"), "not a whole number");
        });
        check("tokenizer basic", () -> assertEq("hello|,|world|!", tokens("Hello, World!")));
        check("tokenizer nfkc ligature and fullwidth", () -> assertEq("file|abc|123", tokens("\uFB01le \uFF21\uFF22\uFF23 \uFF11\uFF12\uFF13")));
        check("tokenizer dotted capital I", () -> assertEq("istanbul", tokens("\u0130stanbul")));
        check("tokenizer final sigma is simple", () -> assertEq("\u03bf\u03b4\u03bf\u03c3", tokens("\u039f\u0394\u039f\u03a3")));
        check("tokenizer surrogate pair symbol", () -> assertEq("i|\u2764|\ud83d\ude00|x", tokens("I \u2764 \ud83d\ude00x")));
        check("tokenizer supplementary letters", () -> assertEq("\ud801\udc28\ud801\udc29", tokens("\ud801\udc00\ud801\udc01")));
        check("tokenizer combining marks stay in words", () -> assertEq("caf\u00e9|ok|\u00f1\u0105|\u0915\u093f", tokens("cafe\u0301 ok n\u0303a\u0328 \u0915\u093f")));
        check("tokenizer separators and controls", () -> assertEq("a|b|c|d", tokens("a\u00a0b\u200bc\td\u0000")));
        check("tokenizer numbers", () -> assertEq("3|.|14|1|\u2044|2", tokens("3.14 \u00bd")));
        check("tokenizer superscript nfkc", () -> assertEq("x2", tokens("x\u00b2")));
        check("tokenizer max tokens", () -> assertEq(Arrays.asList("a", "b"), Tokenizer.tokenize("a b c d", 2)));
        check("tokenizer ids and empty text", () -> {
            Tokenizer t = new Tokenizer(Arrays.asList("[PAD]", "[UNK]", "hello", "!", "hello"), 8);
            assertEq("4 3 1", join(t.ids("HELLO! zzz")));
            assertEq("1", join(t.ids(" \t ")));
        });
        check("vocab parsing", () -> assertEq(Arrays.asList("[PAD]", "[UNK]", "a", ""),
                Tokenizer.parseVocab("[PAD]\n[UNK]\r\na\n\n".getBytes(StandardCharsets.UTF_8))));

        // ---- JSON -----------------------------------------------------------------------------------
        check("json values", () -> {
            @SuppressWarnings("unchecked")
            Map<String, Object> m = (Map<String, Object>) Json.parse("{\"a\": [1, -2.5e3, true, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\"}");
            assertEq(Arrays.asList(1L, -2500.0, true, null), m.get("a"));
            assertEq("x\u00e9\ud83d\ude00\n", m.get("s"));
        });
        check("json rejects garbage", () -> {
            for (String bad : new String[] {"{", "[1,]", "{\"a\" 1}", "\"\\x\"", "01x", "{} x"}) {
                try {
                    Json.parse(bad);
                    throw new AssertionError("parsed " + bad);
                } catch (IllegalArgumentException expected) {
                    // fine
                }
            }
        });

        // ---- codes and Hamming ------------------------------------------------------------------------
        check("pack little bit order", () -> {
            boolean[] bits = new boolean[12];
            bits[0] = true;
            bits[9] = true;
            byte[] c = Codes.pack(bits);
            assertEq("1 2", (c[0] & 0xff) + " " + (c[1] & 0xff));
            assertTrue(Arrays.equals(bits, Codes.unpack(c, 12)), "unpack");
            assertEq(Long.valueOf(1L | (2L << 8)), Codes.toWords(c)[0]);
        });
        check("hamming top-k equals brute force with ties", () -> {
            Random r = new Random(7);
            for (int cb : new int[] {1, 6, 8, 13, 24, 32, 40, 256}) {
                int n = 500;
                byte[] codes = new byte[n * cb];
                r.nextBytes(codes);
                for (int i = 0; i < n * cb; i++) {
                    codes[i] &= (byte) 0x13; // few distinct bits: many ties
                }
                HammingIndex idx = new HammingIndex(codes, cb);
                for (int q = 0; q < 20; q++) {
                    byte[] query = Arrays.copyOfRange(codes, (q * 37 % n) * cb, (q * 37 % n + 1) * cb);
                    for (int k : new int[] {1, 10, n + 5}) {
                        HammingIndex.Hits h = idx.topK(query, k);
                        Integer[] order = new Integer[n];
                        final int[] d = new int[n];
                        for (int i = 0; i < n; i++) {
                            order[i] = i;
                            d[i] = Codes.hamming(Codes.toWords(query), Codes.toWords(Arrays.copyOfRange(codes, i * cb, (i + 1) * cb)));
                        }
                        Arrays.sort(order, (a, b) -> d[a] != d[b] ? Integer.compare(d[a], d[b]) : Integer.compare(a, b));
                        assertEq(Math.min(k, n), h.size());
                        for (int j = 0; j < h.size(); j++) {
                            assertEq(order[j], h.ids[j]);
                            assertEq(d[order[j]], h.distances[j]);
                        }
                    }
                }
            }
        });

        // ---- bundle reader: good and bad bundles ------------------------------------------------------
        if (bundleDir != null) {
            check("bundle opens and verifies", () -> {
                Bundle b = Bundle.open(FileSource.directory(bundleDir));
                assertTrue(b.fileNames().contains("vocab.txt"), "vocab listed");
                assertTrue(b.tokenizer().size() > 2, "vocab loaded");
            });
            check("tampered file -> checksum error", () -> withCopy(bundleDir, dir -> {
                File vocab = new File(dir, "vocab.txt");
                byte[] data = Files.readAllBytes(vocab.toPath());
                data[data.length / 2] ^= 1; // same size, different bytes
                Files.write(vocab.toPath(), data);
                assertBundleError(() -> Bundle.open(FileSource.directory(dir)), "checksum mismatch for bundle file vocab.txt");
            }));
            check("truncated file -> size error", () -> withCopy(bundleDir, dir -> {
                File f = new File(dir, "binarizer.safetensors");
                byte[] data = Files.readAllBytes(f.toPath());
                Files.write(f.toPath(), Arrays.copyOf(data, data.length - 3));
                assertBundleError(() -> Bundle.open(FileSource.directory(dir)), "binarizer.safetensors has");
            }));
            check("missing file -> clear error", () -> withCopy(bundleDir, dir -> {
                assertTrue(new File(dir, "tokenizer.json").delete(), "delete");
                assertBundleError(() -> Bundle.open(FileSource.directory(dir)), "tokenizer.json is missing");
            }));
            check("missing manifest -> not a bundle", () -> withCopy(bundleDir, dir -> {
                assertTrue(new File(dir, "manifest.json").delete(), "delete");
                assertBundleError(() -> Bundle.open(FileSource.directory(dir)), "manifest.json is missing");
            }));
            check("wrong format_version", () -> withCopy(bundleDir, dir -> {
                editManifest(dir, "\"format_version\": 1", "\"format_version\": 99");
                assertBundleError(() -> Bundle.open(FileSource.directory(dir)), "format_version 99 is not supported");
            }));
            check("wrong format", () -> withCopy(bundleDir, dir -> {
                editManifest(dir, "\"ondevice-bundle\"", "\"something-else\"");
                assertBundleError(() -> Bundle.open(FileSource.directory(dir)), "expected \"ondevice-bundle\"");
            }));
            check("corrupt manifest", () -> withCopy(bundleDir, dir -> {
                Files.write(new File(dir, "manifest.json").toPath(), "{\"format\": ".getBytes(StandardCharsets.UTF_8));
                assertBundleError(() -> Bundle.open(FileSource.directory(dir)), "manifest.json is not valid JSON");
            }));
            check("path traversal in manifest", () -> withCopy(bundleDir, dir -> {
                editManifest(dir, "\"vocab.txt\"", "\"../vocab.txt\"");
                assertBundleError(() -> Bundle.open(FileSource.directory(dir)), "invalid file name");
            }));
            check("unlisted file", () -> {
                Bundle b = Bundle.open(FileSource.directory(bundleDir), false);
                assertBundleError(() -> b.read("nope.bin"), "does not list nope.bin");
            });
        }

        // ---- the app's flow on assets written by tools/make_catalog.py (no golden/, no encoder.pt) ----------
        if (assetsDir != null) {
            check("app assets: lazy verification, Java encoder, catalog search", () -> {
                File dir = new File(assetsDir, "bundle");
                assertBundleError(() -> Bundle.open(FileSource.directory(dir)), "is missing"); // golden/ left out
                Bundle b = Bundle.open(FileSource.directory(dir), false);
                JavaEncoder enc = JavaEncoder.fromBundle(b);
                Catalog catalog = Catalog.load(FileSource.directory(new File(assetsDir, "catalog")), b); // as the app
                HammingIndex index = catalog.index;
                List<String> sentences = catalog.sentences;
                assertEq(ParityCheck.readSentencesFile(new File(assetsDir, "catalog/sentences.jsonl")), sentences);
                assertTrue(catalog.dipairStates == null, "no DiPair states in a plain bundle's catalog");
                int exact = 0;
                int n = Math.min(50, sentences.size());
                for (int i = 0; i < n; i++) {
                    HammingIndex.Hits h = index.topK(enc.encode(sentences.get(i)).code, 10);
                    assertEq(0, h.distances[0]); // the sentence finds its own code (or an identical one)
                    exact += index.distance(Codes.toWords(enc.encode(sentences.get(i)).code), i) == 0 ? 1 : 0;
                }
                assertTrue(exact >= n - 1, "Java codes equal the catalog's Python codes for " + exact + "/" + n);
            });
            check("app assets: a modified catalog file is refused", () -> {
                Bundle b = Bundle.open(FileSource.directory(new File(assetsDir, "bundle")), false);
                withCopy(new File(assetsDir, "catalog"), dir -> {
                    File f = new File(dir, "codes.npy");
                    byte[] raw = Files.readAllBytes(f.toPath());
                    raw[raw.length - 1] ^= 1;
                    Files.write(f.toPath(), raw);
                    assertBundleError(() -> Catalog.load(FileSource.directory(dir), b), "codes.npy does not match catalog.json");
                });
            });
        }

        System.out.println("core_tests_passed=" + passed);
        System.out.println("core_tests_failed=" + FAILED.size());
        for (String f : FAILED) {
            System.out.println("FAIL " + f);
        }
        System.exit(FAILED.isEmpty() ? 0 : 1);
    }

    private static String join(int[] a) {
        StringBuilder sb = new StringBuilder();
        for (int x : a) {
            sb.append(sb.length() > 0 ? " " : "").append(x);
        }
        return sb.toString();
    }

    private interface DirCheck {
        void run(File dir) throws Exception;
    }

    private static void withCopy(File src, DirCheck body) throws Exception {
        final Path dst = Files.createTempDirectory("ondevice-bundle-test");
        final Path from = src.toPath();
        try {
            Files.walkFileTree(from, new SimpleFileVisitor<Path>() {
                @Override
                public FileVisitResult preVisitDirectory(Path d, BasicFileAttributes a) throws IOException {
                    Files.createDirectories(dst.resolve(from.relativize(d).toString()));
                    return FileVisitResult.CONTINUE;
                }

                @Override
                public FileVisitResult visitFile(Path f, BasicFileAttributes a) throws IOException {
                    Files.copy(f, dst.resolve(from.relativize(f).toString()), StandardCopyOption.REPLACE_EXISTING);
                    return FileVisitResult.CONTINUE;
                }
            });
            body.run(dst.toFile());
        } finally {
            Files.walkFileTree(dst, new SimpleFileVisitor<Path>() {
                @Override
                public FileVisitResult visitFile(Path f, BasicFileAttributes a) throws IOException {
                    Files.delete(f);
                    return FileVisitResult.CONTINUE;
                }

                @Override
                public FileVisitResult postVisitDirectory(Path d, IOException e) throws IOException {
                    Files.delete(d);
                    return FileVisitResult.CONTINUE;
                }
            });
        }
    }

    private static void editManifest(File dir, String from, String to) throws IOException {
        Path p = new File(dir, "manifest.json").toPath();
        String text = new String(Files.readAllBytes(p), StandardCharsets.UTF_8);
        String edited = text.replace(from, to);
        if (edited.equals(text)) {
            throw new AssertionError("manifest.json has no " + from);
        }
        Files.write(p, edited.getBytes(StandardCharsets.UTF_8));
    }
}
