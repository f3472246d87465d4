package ai.ondevice.core;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small, strict JSON parser (RFC 8259) with no dependencies.
 *
 * <p>Values map to Java as: object -> {@code LinkedHashMap<String, Object>} (key order kept), array ->
 * {@code ArrayList<Object>}, string -> {@code String} (UTF-16, {@code \\uXXXX} surrogate pairs kept as
 * written), number -> {@code Long} when it is an integer that fits, otherwise {@code Double}, true/false ->
 * {@code Boolean}, null -> {@code null}.
 */
public final class Json {
    private final String s;
    private int pos;

    private Json(String s) {
        this.s = s;
    }

    /** Parses one JSON document; anything but whitespace after it is an error. */
    public static Object parse(String text) {
        Json p = new Json(text);
        p.skipWs();
        Object value = p.value(0);
        p.skipWs();
        if (p.pos != p.s.length()) {
            throw p.error("unexpected trailing characters");
        }
        return value;
    }

    /** Parses a JSON object, failing with {@code what} in the message if the document is not one. */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> parseObject(String text, String what) {
        Object v;
        try {
            v = parse(text);
        } catch (IllegalArgumentException e) {
            throw new BundleException(what + " is not valid JSON (" + e.getMessage() + ")");
        }
        if (!(v instanceof Map)) {
            throw new BundleException(what + " is not a JSON object");
        }
        return (Map<String, Object>) v;
    }

    private IllegalArgumentException error(String msg) {
        return new IllegalArgumentException(msg + " at offset " + pos);
    }

    private void skipWs() {
        while (pos < s.length()) {
            char c = s.charAt(pos);
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                pos++;
            } else {
                break;
            }
        }
    }

    private Object value(int depth) {
        if (depth > 512) {
            throw error("nesting too deep");
        }
        if (pos >= s.length()) {
            throw error("unexpected end of input");
        }
        char c = s.charAt(pos);
        switch (c) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return string();
            case 't':
                literal("true");
                return Boolean.TRUE;
            case 'f':
                literal("false");
                return Boolean.FALSE;
            case 'n':
                literal("null");
                return null;
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character '" + c + "'");
        }
    }

    private void literal(String word) {
        if (!s.startsWith(word, pos)) {
            throw error("invalid literal");
        }
        pos += word.length();
    }

    private Map<String, Object> object(int depth) {
        Map<String, Object> out = new LinkedHashMap<String, Object>();
        pos++;
        skipWs();
        if (pos < s.length() && s.charAt(pos) == '}') {
            pos++;
            return out;
        }
        while (true) {
            skipWs();
            if (pos >= s.length() || s.charAt(pos) != '"') {
                throw error("expected a string key");
            }
            String key = string();
            skipWs();
            expect(':');
            skipWs();
            out.put(key, value(depth + 1));
            skipWs();
            if (pos < s.length() && s.charAt(pos) == ',') {
                pos++;
                continue;
            }
            expect('}');
            return out;
        }
    }

    private List<Object> array(int depth) {
        List<Object> out = new ArrayList<Object>();
        pos++;
        skipWs();
        if (pos < s.length() && s.charAt(pos) == ']') {
            pos++;
            return out;
        }
        while (true) {
            skipWs();
            out.add(value(depth + 1));
            skipWs();
            if (pos < s.length() && s.charAt(pos) == ',') {
                pos++;
                continue;
            }
            expect(']');
            return out;
        }
    }

    private void expect(char c) {
        if (pos >= s.length() || s.charAt(pos) != c) {
            throw error("expected '" + c + "'");
        }
        pos++;
    }

    private String string() {
        pos++; // opening quote
        StringBuilder sb = null;
        int start = pos;
        while (true) {
            if (pos >= s.length()) {
                throw error("unterminated string");
            }
            char c = s.charAt(pos);
            if (c == '"') {
                String tail = s.substring(start, pos);
                pos++;
                return sb == null ? tail : sb.append(tail).toString();
            }
            if (c < 0x20) {
                throw error("control character in string");
            }
            if (c != '\\') {
                pos++;
                continue;
            }
            if (sb == null) {
                sb = new StringBuilder();
            }
            sb.append(s, start, pos);
            pos++;
            if (pos >= s.length()) {
                throw error("unterminated escape");
            }
            char e = s.charAt(pos++);
            switch (e) {
                case '"': sb.append('"'); break;
                case '\\': sb.append('\\'); break;
                case '/': sb.append('/'); break;
                case 'b': sb.append('\b'); break;
                case 'f': sb.append('\f'); break;
                case 'n': sb.append('\n'); break;
                case 'r': sb.append('\r'); break;
                case 't': sb.append('\t'); break;
                case 'u':
                    if (pos + 4 > s.length()) {
                        throw error("short \\u escape");
                    }
                    int cp = 0;
                    for (int i = 0; i < 4; i++) {
                        int d = Character.digit(s.charAt(pos + i), 16);
                        if (d < 0) {
                            throw error("bad \\u escape");
                        }
                        cp = cp * 16 + d;
                    }
                    pos += 4;
                    sb.append((char) cp); // surrogate pairs arrive as two escapes and join naturally
                    break;
                default:
                    throw error("bad escape '\\" + e + "'");
            }
            start = pos;
        }
    }

    private Object number() {
        int start = pos;
        if (s.charAt(pos) == '-') {
            pos++;
        }
        boolean integral = true;
        while (pos < s.length()) {
            char c = s.charAt(pos);
            if (c >= '0' && c <= '9') {
                pos++;
            } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
                integral = false;
                pos++;
            } else {
                break;
            }
        }
        String text = s.substring(start, pos);
        try {
            if (integral) {
                try {
                    return Long.valueOf(text);
                } catch (NumberFormatException overflow) {
                    return Double.valueOf(text);
                }
            }
            return Double.valueOf(text);
        } catch (NumberFormatException e) {
            pos = start;
            throw error("bad number '" + text + "'");
        }
    }

    // ---- typed accessors used by the bundle reader -------------------------------------------------

    /** {@code map.get(key)} as a long, or a BundleException naming {@code what}. */
    public static long getLong(Map<String, Object> map, String key, String what) {
        Object v = map.get(key);
        if (v instanceof Long) {
            return (Long) v;
        }
        if (v instanceof Double && ((Double) v) == Math.rint((Double) v)) {
            return ((Double) v).longValue();
        }
        throw new BundleException(what + ": \"" + key + "\" must be an integer, got " + describe(v));
    }

    /** {@code map.get(key)} as a finite double (a JSON integer or real), or a BundleException naming {@code what}. */
    public static double getDouble(Map<String, Object> map, String key, String what) {
        Object v = map.get(key);
        if ((v instanceof Long || v instanceof Double) && !Double.isNaN(((Number) v).doubleValue())
                && !Double.isInfinite(((Number) v).doubleValue())) {
            return ((Number) v).doubleValue();
        }
        throw new BundleException(what + ": \"" + key + "\" must be a finite number, got " + describe(v));
    }

    /** {@code map.get(key)} as a string, or a BundleException naming {@code what}. */
    public static String getString(Map<String, Object> map, String key, String what) {
        Object v = map.get(key);
        if (v instanceof String) {
            return (String) v;
        }
        throw new BundleException(what + ": \"" + key + "\" must be a string, got " + describe(v));
    }

    /** {@code map.get(key)} as an object, or a BundleException naming {@code what}. */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> getObject(Map<String, Object> map, String key, String what) {
        Object v = map.get(key);
        if (v instanceof Map) {
            return (Map<String, Object>) v;
        }
        throw new BundleException(what + ": \"" + key + "\" must be an object, got " + describe(v));
    }

    static String describe(Object v) {
        if (v == null) {
            return "nothing";
        }
        String text = String.valueOf(v);
        return text.length() > 40 ? text.substring(0, 40) + "..." : text;
    }
}
