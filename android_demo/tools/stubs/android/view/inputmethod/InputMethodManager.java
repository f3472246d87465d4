package android.view.inputmethod; public final class InputMethodManager { public boolean hideSoftInputFromWindow(android.os.IBinder t, int f){return true;} }
