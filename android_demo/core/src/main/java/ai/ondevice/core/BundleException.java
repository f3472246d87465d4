package ai.ondevice.core;

/**
 * A bundle (or one of its files) cannot be used: missing, tampered, wrong format or inconsistent.
 * The message is one line that says what is wrong and what to do about it.
 */
public class BundleException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public BundleException(String message) {
        super(message);
    }

    public BundleException(String message, Throwable cause) {
        super(message, cause);
    }
}
