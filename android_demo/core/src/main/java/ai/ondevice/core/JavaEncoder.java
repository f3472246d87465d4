package ai.ondevice.core;

/** Tokenizer + pure-Java student forward pass + binarizer: encodes with no native dependency. */
public final class JavaEncoder implements Encoder {
    private final Tokenizer tokenizer;
    private final Student student;
    private final Binarizer binarizer;

    public JavaEncoder(Tokenizer tokenizer, Student student, Binarizer binarizer) {
        if (student.dim() != binarizer.dim()) {
            throw new BundleException("student output dim " + student.dim() + " != binarizer dim " + binarizer.dim());
        }
        this.tokenizer = tokenizer;
        this.student = student;
        this.binarizer = binarizer;
    }

    /** Loads the tokenizer, student weights (needs a bundle exported with --with-weights) and binarizer. */
    public static JavaEncoder fromBundle(Bundle bundle) {
        return new JavaEncoder(bundle.tokenizer(), bundle.student(), bundle.binarizer());
    }

    @Override
    public Encoding encode(String text) {
        return encodeIds(tokenizer.ids(text));
    }

    public Encoding encodeIds(int[] ids) {
        float[] embedding = student.forward(ids);
        return new Encoding(ids, embedding, binarizer.code(embedding));
    }

    public Tokenizer tokenizer() {
        return tokenizer;
    }

    @Override
    public String name() {
        return "java";
    }
}
