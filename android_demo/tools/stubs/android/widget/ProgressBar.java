package android.widget; public class ProgressBar extends android.view.View {}
