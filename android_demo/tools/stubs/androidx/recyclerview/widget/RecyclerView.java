package androidx.recyclerview.widget; public class RecyclerView extends android.view.ViewGroup {
 public abstract static class ViewHolder { public final android.view.View itemView; public ViewHolder(android.view.View v){itemView=v;} }
 public abstract static class Adapter<VH extends ViewHolder> { public abstract VH onCreateViewHolder(android.view.ViewGroup p, int t); public abstract void onBindViewHolder(VH h, int pos); public abstract int getItemCount(); public final void notifyDataSetChanged(){} }
 public abstract static class LayoutManager {} public abstract static class ItemDecoration {}
 public void setLayoutManager(LayoutManager m){} public void setAdapter(Adapter<?> a){} public void addItemDecoration(ItemDecoration d){} }
