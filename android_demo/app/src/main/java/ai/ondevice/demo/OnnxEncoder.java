package ai.ondevice.demo;

import java.nio.ByteBuffer;
import java.nio.FloatBuffer;
import java.nio.LongBuffer;
import java.util.HashMap;
import java.util.Map;

import ai.onnxruntime.OnnxTensor;
import ai.onnxruntime.OnnxValue;
import ai.onnxruntime.OrtEnvironment;
import ai.onnxruntime.OrtException;
import ai.onnxruntime.OrtSession;
import ai.ondevice.core.Bundle;
import ai.ondevice.core.BundleException;
import ai.ondevice.core.Encoder;
import ai.ondevice.core.Tokenizer;

/**
 * Encodes with the bundle's encoder.onnx through ONNX Runtime for Android. The graph takes
 * {@code ids} int64 [batch, tokens] (right-padded with 0) and {@code lengths} int64 [batch], and returns
 * {@code embedding} float32 [batch, dim] and {@code code} uint8 [batch, code_bytes]; a DiPair bundle's graph also
 * returns {@code token_states_a} float32 [batch, N, D] and {@code token_states_b} [batch, M, D], what its head
 * scores ({@link #encodeWithStates}). Tokenization is the core's {@link Tokenizer}, identical to Python's.
 */
final class OnnxEncoder implements Encoder {
    /** A text's encoding and its DiPair token states as side a (N x D) and side b (M x D) of a pair, row-major. */
    static final class StatesEncoding {
        final Encoding encoding;
        final float[] statesA;
        final float[] statesB;

        StatesEncoding(Encoding encoding, float[] statesA, float[] statesB) {
            this.encoding = encoding;
            this.statesA = statesA;
            this.statesB = statesB;
        }
    }

    private final OrtEnvironment env;
    private final OrtSession session;
    private final Tokenizer tokenizer;
    private final int dim;
    private final int codeBytes;

    OnnxEncoder(Bundle bundle, Tokenizer tokenizer, int threads) {
        this.env = OrtEnvironment.getEnvironment();
        this.tokenizer = tokenizer;
        this.dim = bundle.dim();
        this.codeBytes = bundle.codeBytes();
        byte[] model = bundle.read("encoder.onnx"); // size and SHA-256 checked against the manifest
        try {
            OrtSession.SessionOptions options = new OrtSession.SessionOptions();
            options.setIntraOpNumThreads(threads);
            options.setOptimizationLevel(OrtSession.SessionOptions.OptLevel.ALL_OPT);
            // exact int8 products on x86 without VNNI (an emulator on such a host); a no-op on ARM phones
            options.addConfigEntry("session.x64quantprecision", "1");
            this.session = env.createSession(model, options);
        } catch (OrtException e) {
            throw new BundleException("ONNX Runtime cannot load encoder.onnx: " + e.getMessage(), e);
        }
    }

    @Override
    public Encoding encode(String text) {
        return run(text, false).encoding;
    }

    /** {@link #encode} plus the text's DiPair token states (a DiPair bundle's graph only). */
    StatesEncoding encodeWithStates(String text) {
        return run(text, true);
    }

    private StatesEncoding run(String text, boolean states) {
        int[] ids = tokenizer.ids(text);
        long[] ids64 = new long[ids.length];
        for (int i = 0; i < ids.length; i++) {
            ids64[i] = ids[i];
        }
        OnnxTensor idsTensor = null;
        OnnxTensor lengthsTensor = null;
        OrtSession.Result result = null;
        try {
            idsTensor = OnnxTensor.createTensor(env, LongBuffer.wrap(ids64), new long[] {1, ids.length});
            lengthsTensor = OnnxTensor.createTensor(env, LongBuffer.wrap(new long[] {ids.length}), new long[] {1});
            Map<String, OnnxTensor> inputs = new HashMap<String, OnnxTensor>();
            inputs.put("ids", idsTensor);
            inputs.put("lengths", lengthsTensor);
            result = session.run(inputs);
            FloatBuffer embedding = output(result, "embedding").getFloatBuffer();
            ByteBuffer code = output(result, "code").getByteBuffer();
            float[] e = new float[dim];
            embedding.get(e);
            byte[] c = new byte[codeBytes];
            code.get(c);
            Encoding encoding = new Encoding(ids, e, c);
            if (!states) {
                return new StatesEncoding(encoding, null, null);
            }
            return new StatesEncoding(encoding, floats(output(result, "token_states_a")),
                    floats(output(result, "token_states_b")));
        } catch (OrtException e) {
            throw new IllegalStateException("encoder.onnx failed: " + e.getMessage(), e);
        } finally {
            if (result != null) {
                result.close();
            }
            if (lengthsTensor != null) {
                lengthsTensor.close();
            }
            if (idsTensor != null) {
                idsTensor.close();
            }
        }
    }

    private static float[] floats(OnnxTensor tensor) {
        FloatBuffer buffer = tensor.getFloatBuffer();
        float[] out = new float[buffer.remaining()];
        buffer.get(out);
        return out;
    }

    private static OnnxTensor output(OrtSession.Result result, String name) {
        OnnxValue value = result.get(name).orElseThrow(() -> new IllegalStateException("encoder.onnx has no output " + name));
        return (OnnxTensor) value;
    }

    @Override
    public String name() {
        return "onnx";
    }

    @Override
    public void close() {
        try {
            session.close();
        } catch (OrtException ignored) {
            // closing twice or after a failed load: nothing left to free
        }
    }
}
