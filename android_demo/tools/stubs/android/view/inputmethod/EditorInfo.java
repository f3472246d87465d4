package android.view.inputmethod; public class EditorInfo { public static final int IME_ACTION_SEARCH=3; }
