package ai.ondevice.core;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Reads a safetensors file: an 8-byte little-endian header length N, N bytes of JSON header
 * {@code {"name": {"dtype", "shape", "data_offsets": [start, end]}, "__metadata__": {...}}}, then the data
 * (offsets relative to the end of the header). F32 and F16 tensors can be read as floats.
 */
public final class SafeTensors {
    /** One tensor: its dtype, shape and raw little-endian bytes. */
    public static final class Tensor {
        public final String name;
        public final String dtype;
        public final int[] shape;
        final ByteBuffer data;

        Tensor(String name, String dtype, int[] shape, ByteBuffer data) {
            this.name = name;
            this.dtype = dtype;
            this.shape = shape;
            this.data = data;
        }

        public long numel() {
            long n = 1;
            for (int d : shape) {
                n *= d;
            }
            return n;
        }

        /** The values as a flat row-major float array; the tensor must be F32 or F16 (widened exactly). */
        public float[] floats() {
            float[] out = new float[(int) numel()];
            if ("F16".equals(dtype)) {
                java.nio.ShortBuffer halves = data.duplicate().order(ByteOrder.LITTLE_ENDIAN).asShortBuffer();
                for (int i = 0; i < out.length; i++) {
                    out[i] = halfToFloat(halves.get(i));
                }
                return out;
            }
            if (!"F32".equals(dtype)) {
                throw new BundleException("tensor " + name + " is " + dtype + ", expected F32 or F16; export with fp32 weights");
            }
            data.duplicate().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
            return out;
        }

        /** Fails unless the shape is exactly {@code expected}. */
        public Tensor requireShape(String what, int... expected) {
            if (!java.util.Arrays.equals(shape, expected)) {
                throw new BundleException(what + ": tensor " + name + " has shape " + java.util.Arrays.toString(shape)
                        + ", expected " + java.util.Arrays.toString(expected) + "; the weights do not match the manifest");
            }
            return this;
        }
    }

    /** IEEE 754 binary16 -> float32, exact (Float.float16ToFloat needs Java 20; this core targets Java 8). */
    static float halfToFloat(short half) {
        int h = half & 0xFFFF;
        int sign = (h & 0x8000) << 16;
        int exp = (h >>> 10) & 0x1F;
        int mant = h & 0x3FF;
        if (exp == 0x1F) { // inf / NaN
            return Float.intBitsToFloat(sign | 0x7F800000 | (mant << 13));
        }
        if (exp == 0) { // zero / subnormal: mant * 2^-24, exact in float
            float v = mant * 5.9604645E-8f;
            return sign != 0 ? -v : v;
        }
        return Float.intBitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
    }

    private final Map<String, Tensor> tensors;
    private final Map<String, Object> metadata;

    private SafeTensors(Map<String, Tensor> tensors, Map<String, Object> metadata) {
        this.tensors = tensors;
        this.metadata = metadata;
    }

    private static int dtypeSize(String dtype) {
        if ("F64".equals(dtype) || "I64".equals(dtype) || "U64".equals(dtype)) {
            return 8;
        }
        if ("F32".equals(dtype) || "I32".equals(dtype) || "U32".equals(dtype)) {
            return 4;
        }
        if ("F16".equals(dtype) || "BF16".equals(dtype) || "I16".equals(dtype) || "U16".equals(dtype)) {
            return 2;
        }
        if ("I8".equals(dtype) || "U8".equals(dtype) || "BOOL".equals(dtype)) {
            return 1;
        }
        return -1;
    }

    /** Parses safetensors bytes; {@code what} names the file in error messages. */
    @SuppressWarnings("unchecked")
    public static SafeTensors parse(byte[] bytes, String what) {
        if (bytes.length < 8) {
            throw new BundleException(what + " is too short to be a safetensors file");
        }
        long n = ByteBuffer.wrap(bytes, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        if (n < 2 || n > bytes.length - 8) {
            throw new BundleException(what + " has a bad safetensors header length " + n);
        }
        Map<String, Object> header = Json.parseObject(new String(bytes, 8, (int) n, StandardCharsets.UTF_8), what + " header");
        int base = 8 + (int) n;
        Map<String, Tensor> out = new LinkedHashMap<String, Tensor>();
        Map<String, Object> meta = Collections.emptyMap();
        for (Map.Entry<String, Object> e : header.entrySet()) {
            if ("__metadata__".equals(e.getKey())) {
                if (e.getValue() instanceof Map) {
                    meta = (Map<String, Object>) e.getValue();
                }
                continue;
            }
            String label = what + " tensor " + e.getKey();
            if (!(e.getValue() instanceof Map)) {
                throw new BundleException(label + " has no description");
            }
            Map<String, Object> info = (Map<String, Object>) e.getValue();
            String dtype = Json.getString(info, "dtype", label);
            Object shapeObj = info.get("shape");
            Object offsObj = info.get("data_offsets");
            if (!(shapeObj instanceof List) || !(offsObj instanceof List) || ((List<Object>) offsObj).size() != 2) {
                throw new BundleException(label + " needs a shape and two data_offsets");
            }
            List<Object> shapeList = (List<Object>) shapeObj;
            int[] shape = new int[shapeList.size()];
            long numel = 1;
            for (int i = 0; i < shape.length; i++) {
                shape[i] = (int) whole(shapeList.get(i), Integer.MAX_VALUE, label + " shape");
                if (shape[i] != 0 && numel > bytes.length / shape[i]) {
                    throw new BundleException(label + " has a shape larger than the file");
                }
                numel *= shape[i];
            }
            long start = whole(((List<Object>) offsObj).get(0), Integer.MAX_VALUE, label + " data_offsets");
            long end = whole(((List<Object>) offsObj).get(1), Integer.MAX_VALUE, label + " data_offsets");
            int size = dtypeSize(dtype);
            if (start < 0 || end < start || base + end > bytes.length || (size > 0 && end - start != numel * size)) {
                throw new BundleException(label + " has data_offsets [" + start + ", " + end + "] that do not fit the file or shape");
            }
            ByteBuffer data = ByteBuffer.wrap(bytes, base + (int) start, (int) (end - start)).slice();
            out.put(e.getKey(), new Tensor(e.getKey(), dtype, shape, data));
        }
        return new SafeTensors(out, meta);
    }

    /** A JSON number that is a whole number in 0..max (shapes and offsets), else a BundleException. */
    private static long whole(Object v, long max, String label) {
        if (!(v instanceof Number)) {
            throw new BundleException(label + " holds " + v + ", not a number");
        }
        double d = ((Number) v).doubleValue();
        if (d < 0 || d > max || d != Math.rint(d)) {
            throw new BundleException(label + " holds " + v + ", not a whole number in 0.." + max);
        }
        return ((Number) v).longValue();
    }

    public Tensor get(String name, String what) {
        Tensor t = tensors.get(name);
        if (t == null) {
            throw new BundleException(what + " has no tensor \"" + name + "\" (has " + new ArrayList<String>(tensors.keySet()) + ")");
        }
        return t;
    }

    public boolean has(String name) {
        return tensors.containsKey(name);
    }

    public Map<String, Object> metadata() {
        return metadata;
    }
}
