package android.widget; public class RadioGroup extends android.view.ViewGroup { public int getCheckedRadioButtonId(){return 0;} }
