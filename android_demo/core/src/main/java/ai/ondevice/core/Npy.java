package ai.ondevice.core;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Reads .npy arrays (format versions 1.0, 2.0 and 3.0; C order; little-endian or single-byte dtypes):
 * float32 {@code <f4}, int64 {@code <i8}, int32 {@code <i4}, uint8 {@code |u1} and int8 {@code |i1}.
 */
public final class Npy {
    public final String dtype;
    public final int[] shape;
    private final ByteBuffer data;

    private Npy(String dtype, int[] shape, ByteBuffer data) {
        this.dtype = dtype;
        this.shape = shape;
        this.data = data;
    }

    public int rows() {
        return shape.length == 0 ? 1 : shape[0];
    }

    /** Elements per row (1 for a 1-d array). */
    public int cols() {
        int n = 1;
        for (int i = 1; i < shape.length; i++) {
            n *= shape[i];
        }
        return n;
    }

    public long numel() {
        long n = 1;
        for (int d : shape) {
            n *= d;
        }
        return n;
    }

    private void requireDtype(String... allowed) {
        for (String a : allowed) {
            if (a.equals(dtype)) {
                return;
            }
        }
        throw new BundleException("npy array has dtype " + dtype + ", expected " + java.util.Arrays.toString(allowed));
    }

    public float[] floats() {
        requireDtype("<f4");
        float[] out = new float[(int) numel()];
        data.duplicate().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
        return out;
    }

    /** Integer arrays (int64, int32 or uint8) widened to long. */
    public long[] longs() {
        long[] out = new long[(int) numel()];
        ByteBuffer b = data.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        if ("<i8".equals(dtype)) {
            b.asLongBuffer().get(out);
        } else if ("<i4".equals(dtype)) {
            for (int i = 0; i < out.length; i++) {
                out[i] = b.getInt(i * 4);
            }
        } else if ("|u1".equals(dtype)) {
            for (int i = 0; i < out.length; i++) {
                out[i] = b.get(i) & 0xff;
            }
        } else {
            requireDtype("<i8", "<i4", "|u1");
        }
        return out;
    }

    public byte[] bytes() {
        requireDtype("|u1", "<u1");
        return rawBytes();
    }

    /** An int8 array's values, as Java's signed bytes. */
    public byte[] int8() {
        requireDtype("|i1");
        return rawBytes();
    }

    private byte[] rawBytes() {
        byte[] out = new byte[(int) numel()];
        data.duplicate().get(out);
        return out;
    }

    /** Parses .npy bytes; {@code what} names the file in error messages. */
    public static Npy parse(byte[] bytes, String what) {
        if (bytes.length < 10 || (bytes[0] & 0xff) != 0x93 || !"NUMPY".equals(new String(bytes, 1, 5, StandardCharsets.US_ASCII))) {
            throw new BundleException(what + " is not a .npy file");
        }
        int major = bytes[6] & 0xff;
        ByteBuffer b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        int headerLen;
        int headerStart;
        if (major == 1) {
            headerLen = b.getShort(8) & 0xffff;
            headerStart = 10;
        } else if (major == 2 || major == 3) {
            headerLen = b.getInt(8);
            headerStart = 12;
        } else {
            throw new BundleException(what + " has unsupported .npy version " + major);
        }
        if (headerLen < 0 || headerStart + headerLen > bytes.length) {
            throw new BundleException(what + " has a truncated .npy header");
        }
        String header = new String(bytes, headerStart, headerLen, major == 3 ? StandardCharsets.UTF_8 : StandardCharsets.ISO_8859_1);
        String descr = dictValue(header, "descr", what);
        String fortran = dictValue(header, "fortran_order", what);
        String shapeText = dictValue(header, "shape", what);
        if (!"False".equals(fortran)) {
            throw new BundleException(what + " is in Fortran order; write it with C order");
        }
        descr = unquote(descr);
        if ("<u1".equals(descr)) {
            descr = "|u1";
        } else if ("<i1".equals(descr)) {
            descr = "|i1";
        }
        int itemSize;
        if ("<f4".equals(descr) || "<i4".equals(descr)) {
            itemSize = 4;
        } else if ("<i8".equals(descr)) {
            itemSize = 8;
        } else if ("|u1".equals(descr) || "|i1".equals(descr)) {
            itemSize = 1;
        } else {
            throw new BundleException(what + " has unsupported dtype " + descr + " (expected <f4, <i4, <i8, |u1 or |i1)");
        }
        int[] shape = parseShape(shapeText, what);
        long numel = 1;
        for (int d : shape) {
            numel *= d;
        }
        int dataStart = headerStart + headerLen;
        if ((long) bytes.length - dataStart != numel * itemSize) {
            throw new BundleException(what + " holds " + (bytes.length - dataStart) + " data bytes, shape needs " + numel * itemSize);
        }
        ByteBuffer data = ByteBuffer.wrap(bytes, dataStart, bytes.length - dataStart).slice();
        return new Npy(descr, shape, data);
    }

    private static String unquote(String s) {
        s = s.trim();
        if (s.length() >= 2 && (s.charAt(0) == '\'' || s.charAt(0) == '"')) {
            return s.substring(1, s.length() - 1);
        }
        return s;
    }

    /** The raw text of {@code key}'s value in the header's Python dict literal. */
    private static String dictValue(String header, String key, String what) {
        int k = header.indexOf("'" + key + "'");
        if (k < 0) {
            k = header.indexOf("\"" + key + "\"");
        }
        if (k < 0) {
            throw new BundleException(what + " .npy header has no " + key);
        }
        int colon = header.indexOf(':', k + key.length() + 2);
        int i = colon + 1;
        while (i < header.length() && header.charAt(i) == ' ') {
            i++;
        }
        int end;
        if (header.charAt(i) == '(') {
            end = header.indexOf(')', i) + 1;
        } else if (header.charAt(i) == '\'' || header.charAt(i) == '"') {
            end = header.indexOf(header.charAt(i), i + 1) + 1;
        } else {
            end = i;
            while (end < header.length() && header.charAt(end) != ',' && header.charAt(end) != '}') {
                end++;
            }
        }
        if (colon < 0 || end <= i) {
            throw new BundleException(what + " has a malformed .npy header");
        }
        return header.substring(i, end).trim();
    }

    private static int[] parseShape(String text, String what) {
        if (!text.startsWith("(") || !text.endsWith(")")) {
            throw new BundleException(what + " has a malformed .npy shape " + text);
        }
        List<Integer> dims = new ArrayList<Integer>();
        for (String part : text.substring(1, text.length() - 1).split(",")) {
            String p = part.trim();
            if (p.endsWith("L")) {
                p = p.substring(0, p.length() - 1);
            }
            if (!p.isEmpty()) {
                dims.add(Integer.parseInt(p));
            }
        }
        int[] shape = new int[dims.size()];
        for (int i = 0; i < shape.length; i++) {
            shape[i] = dims.get(i);
        }
        return shape;
    }
}
