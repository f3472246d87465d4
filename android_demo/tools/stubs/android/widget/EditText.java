package android.widget; public class EditText extends TextView { @Override public android.text.Editable getText(){return null;} }
