package android.widget; public class RadioButton extends CompoundButton {}
