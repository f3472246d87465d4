package ai.ondevice.core;

/**
 * Packed binary codes, bit order "little" (the one ondevice uses, see {@code ondevice/bits.py}):
 * bit j of a code is in byte j / 8 at bit position j % 8 (least significant first). Read as little-endian
 * 64-bit words, bit j is bit j % 64 of word j / 64. Pad bits are zero and never count in a distance.
 */
public final class Codes {
    private Codes() {
    }

    public static int codeBytes(int bits) {
        return (bits + 7) / 8;
    }

    public static int words(int codeBytes) {
        return (codeBytes + 7) / 8;
    }

    /** Packs {@code bits[j] != 0} (or a boolean per bit) into little-order bytes. */
    public static byte[] pack(boolean[] bits) {
        byte[] out = new byte[codeBytes(bits.length)];
        for (int j = 0; j < bits.length; j++) {
            if (bits[j]) {
                out[j >>> 3] |= (byte) (1 << (j & 7));
            }
        }
        return out;
    }

    /** Unpacks the first {@code bits} bits of a little-order code. */
    public static boolean[] unpack(byte[] code, int bits) {
        if (code.length != codeBytes(bits)) {
            throw new IllegalArgumentException("a " + bits + "-bit code has " + codeBytes(bits) + " bytes, got " + code.length);
        }
        boolean[] out = new boolean[bits];
        for (int j = 0; j < bits; j++) {
            out[j] = ((code[j >>> 3] >>> (j & 7)) & 1) != 0;
        }
        return out;
    }

    /** One code as little-endian 64-bit words (zero-padded to a whole word). */
    public static long[] toWords(byte[] code) {
        long[] out = new long[words(code.length)];
        toWords(code, 0, code.length, out, 0);
        return out;
    }

    /** {@code n} consecutive codes of {@code codeBytes} bytes each as {@code n * words(codeBytes)} words. */
    public static long[] toWords(byte[] codes, int codeBytes) {
        if (codeBytes <= 0 || codes.length % codeBytes != 0) {
            throw new IllegalArgumentException(codes.length + " bytes are not whole codes of " + codeBytes + " bytes");
        }
        int n = codes.length / codeBytes;
        int w = words(codeBytes);
        long[] out = new long[n * w];
        for (int i = 0; i < n; i++) {
            toWords(codes, i * codeBytes, codeBytes, out, i * w);
        }
        return out;
    }

    private static void toWords(byte[] src, int off, int len, long[] dst, int dstOff) {
        for (int b = 0; b < len; b++) {
            dst[dstOff + (b >>> 3)] |= (src[off + b] & 0xffL) << ((b & 7) * 8);
        }
    }

    /** Hamming distance between two word-packed codes of equal length. */
    public static int hamming(long[] a, long[] b) {
        int d = 0;
        for (int i = 0; i < a.length; i++) {
            d += Long.bitCount(a[i] ^ b[i]);
        }
        return d;
    }

    /** Number of equal bits among the first {@code bits} bits of two byte codes. */
    public static int agreeingBits(byte[] a, byte[] b, int bits) {
        int differ = 0;
        for (int j = 0; j < bits; j++) {
            differ += ((a[j >>> 3] ^ b[j >>> 3]) >>> (j & 7)) & 1;
        }
        return bits - differ;
    }
}
