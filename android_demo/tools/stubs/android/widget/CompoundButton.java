package android.widget; public abstract class CompoundButton extends Button {}
