package ai.ondevice.core;

import java.nio.charset.StandardCharsets;
import java.text.Normalizer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The student's tokenizer, spec version 1, exactly as {@code ondevice/tokenizer.py}:
 *
 * <ol>
 *   <li>Unicode NFKC.</li>
 *   <li>Per-code-point simple lowercase ({@link Character#toLowerCase(int)}; U+0130 becomes 'i').</li>
 *   <li>Code points of general category L*, M* or Nd are word characters; maximal runs form one token.
 *       Z* and C* only separate tokens. Every other code point is a token by itself.</li>
 *   <li>Keep the first {@code maxTokens} tokens.</li>
 *   <li>Ids are line numbers in vocab.txt; 0 is [PAD], 1 is [UNK]; unknown tokens become 1; a text with no
 *       tokens becomes the single id 1.</li>
 * </ol>
 *
 * <p>Categories, case mapping and NFKC come from the JVM's Unicode tables (Java 17: Unicode 13; Android:
 * the device's ICU). Characters assigned in a later Unicode version than the runtime knows are "unassigned"
 * (a separator) here, while Python may know them; texts made of characters known to both agree exactly.
 */
public final class Tokenizer {
    public static final int SPEC_VERSION = 1;
    public static final int PAD_ID = 0;
    public static final int UNK_ID = 1;
    public static final String PAD = "[PAD]";
    public static final String UNK = "[UNK]";

    private final List<String> vocab;
    private final Map<String, Integer> index;
    private final int maxTokens;

    public Tokenizer(List<String> vocab, int maxTokens) {
        if (vocab.size() < 2 || !PAD.equals(vocab.get(PAD_ID)) || !UNK.equals(vocab.get(UNK_ID))) {
            throw new BundleException("vocab.txt must start with " + PAD + " and " + UNK + "; re-export the bundle");
        }
        if (maxTokens < 1) {
            throw new BundleException("tokenizer max_tokens must be >= 1, got " + maxTokens);
        }
        this.vocab = Collections.unmodifiableList(new ArrayList<String>(vocab));
        this.index = new HashMap<String, Integer>(vocab.size() * 2);
        for (int i = 0; i < vocab.size(); i++) {
            index.put(vocab.get(i), i); // a repeated token maps to its last line, as a Python dict does
        }
        this.maxTokens = maxTokens;
    }

    /** Reads vocab.txt bytes: UTF-8, one token per line, a final newline optional. */
    public static List<String> parseVocab(byte[] utf8) {
        String text = new String(utf8, StandardCharsets.UTF_8);
        List<String> out = new ArrayList<String>();
        int start = 0;
        for (int i = 0; i < text.length(); i++) {
            if (text.charAt(i) == '\n') {
                out.add(stripCr(text.substring(start, i)));
                start = i + 1;
            }
        }
        if (start < text.length()) {
            out.add(stripCr(text.substring(start)));
        }
        return out;
    }

    private static String stripCr(String line) {
        // Python reads vocab.txt with universal newlines; tokens never contain '\r' (it is a separator).
        return line.endsWith("\r") ? line.substring(0, line.length() - 1) : line;
    }

    public int size() {
        return vocab.size();
    }

    public int maxTokens() {
        return maxTokens;
    }

    public List<String> vocab() {
        return vocab;
    }

    /** Lowercase tokens of {@code text} by spec version 1, at most {@code maxTokens} of them (<= 0: all). */
    public static List<String> tokenize(String text, int maxTokens) {
        String norm = Normalizer.normalize(text, Normalizer.Form.NFKC);
        List<String> tokens = new ArrayList<String>();
        StringBuilder word = new StringBuilder();
        int limit = maxTokens > 0 ? maxTokens : Integer.MAX_VALUE;
        for (int i = 0; i < norm.length() && tokens.size() < limit; ) {
            int cp = norm.codePointAt(i);
            i += Character.charCount(cp);
            cp = simpleLower(cp);
            int kind = kind(cp);
            if (kind == WORD) {
                word.appendCodePoint(cp);
                continue;
            }
            if (word.length() > 0) {
                tokens.add(word.toString());
                word.setLength(0);
            }
            if (kind == SYMBOL && tokens.size() < limit) {
                tokens.add(new String(Character.toChars(cp)));
            }
        }
        if (word.length() > 0 && tokens.size() < limit) {
            tokens.add(word.toString());
        }
        return tokens;
    }

    /** Token ids of one text (never empty). */
    public int[] ids(String text) {
        List<String> tokens = tokenize(text, maxTokens);
        if (tokens.isEmpty()) {
            return new int[] {UNK_ID};
        }
        int[] out = new int[tokens.size()];
        for (int i = 0; i < out.length; i++) {
            Integer id = index.get(tokens.get(i));
            out[i] = id == null ? UNK_ID : id;
        }
        return out;
    }

    static final int WORD = 0;
    static final int SEPARATOR = 1;
    static final int SYMBOL = 2;

    static int simpleLower(int cp) {
        return cp == 0x130 ? 'i' : Character.toLowerCase(cp);
    }

    static int kind(int cp) {
        switch (Character.getType(cp)) {
            case Character.UPPERCASE_LETTER:
            case Character.LOWERCASE_LETTER:
            case Character.TITLECASE_LETTER:
            case Character.MODIFIER_LETTER:
            case Character.OTHER_LETTER:
            case Character.NON_SPACING_MARK:
            case Character.ENCLOSING_MARK:
            case Character.COMBINING_SPACING_MARK:
            case Character.DECIMAL_DIGIT_NUMBER:
                return WORD;
            case Character.SPACE_SEPARATOR:
            case Character.LINE_SEPARATOR:
            case Character.PARAGRAPH_SEPARATOR:
            case Character.CONTROL:
            case Character.FORMAT:
            case Character.PRIVATE_USE:
            case Character.SURROGATE:
            case Character.UNASSIGNED:
                return SEPARATOR;
            default:
                return SYMBOL;
        }
    }
}
