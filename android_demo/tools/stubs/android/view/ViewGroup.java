package android.view; public abstract class ViewGroup extends View {}
