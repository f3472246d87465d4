package ai.ondevice.core;

import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Compares this JVM's tokenizer with Python's on single code points. Input: one line per code point,
 * {@code HEX<TAB>TOKENS}, where TOKENS is Python's {@code tokenize(chr(cp))} with tokens separated by '|' and
 * each token written as '.'-separated hex code points. Prints counts; exits 1 if a code point this JVM knows
 * ({@link Character#isDefined}) is tokenized differently.
 *
 * <pre>java -cp build ai.ondevice.core.UnicodeCheck codepoints.tsv</pre>
 */
public final class UnicodeCheck {
    private UnicodeCheck() {
    }

    public static void main(String[] args) throws Exception {
        int total = 0;
        int same = 0;
        int differUnknown = 0;
        int differKnown = 0;
        BufferedReader in = new BufferedReader(new InputStreamReader(new FileInputStream(args[0]), StandardCharsets.UTF_8));
        try {
            String line;
            while ((line = in.readLine()) != null) {
                int tab = line.indexOf('\t');
                int cp = Integer.parseInt(line.substring(0, tab), 16);
                String want = line.substring(tab + 1);
                String got = encode(Tokenizer.tokenize(new String(Character.toChars(cp)), 0));
                total++;
                if (got.equals(want)) {
                    same++;
                } else if (!Character.isDefined(cp)) {
                    differUnknown++;
                } else {
                    differKnown++;
                    if (differKnown <= 10) {
                        System.out.println(String.format("differ U+%04X python=%s java=%s", cp, want, got));
                    }
                }
            }
        } finally {
            in.close();
        }
        System.out.println("java_unicode=" + System.getProperty("java.version"));
        System.out.println("codepoints=" + total);
        System.out.println("identical=" + same);
        System.out.println("differ_unassigned_in_jvm=" + differUnknown);
        System.out.println("differ_assigned_in_jvm=" + differKnown);
        System.exit(differKnown == 0 ? 0 : 1);
    }

    private static String encode(List<String> tokens) {
        StringBuilder sb = new StringBuilder();
        for (int t = 0; t < tokens.size(); t++) {
            if (t > 0) {
                sb.append('|');
            }
            String tok = tokens.get(t);
            for (int i = 0, k = 0; i < tok.length(); k++) {
                int cp = tok.codePointAt(i);
                i += Character.charCount(cp);
                if (k > 0) {
                    sb.append('.');
                }
                sb.append(Integer.toHexString(cp));
            }
        }
        return sb.toString();
    }
}
