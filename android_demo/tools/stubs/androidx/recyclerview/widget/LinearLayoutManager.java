package androidx.recyclerview.widget; public class LinearLayoutManager extends RecyclerView.LayoutManager { public LinearLayoutManager(android.content.Context c){} }
