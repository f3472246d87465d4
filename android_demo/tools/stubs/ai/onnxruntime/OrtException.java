package ai.onnxruntime; public class OrtException extends Exception { private static final long serialVersionUID = 1L; public OrtException(String m){super(m);} }
