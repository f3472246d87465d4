package ai.ondevice.demo;

import android.view.LayoutInflater;
import android.view.View;
import android.view.ViewGroup;
import android.widget.TextView;

import androidx.annotation.NonNull;
import androidx.recyclerview.widget.RecyclerView;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/** The result list: Hamming distance, catalog row and sentence, best first. */
final class ResultAdapter extends RecyclerView.Adapter<ResultAdapter.Holder> {
    private final List<SearchEngine.Hit> hits = new ArrayList<SearchEngine.Hit>();
    private int bits = 1;

    static final class Holder extends RecyclerView.ViewHolder {
        final TextView distance;
        final TextView sentence;
        final TextView detail;

        Holder(View v) {
            super(v);
            distance = v.findViewById(R.id.distance);
            sentence = v.findViewById(R.id.sentence);
            detail = v.findViewById(R.id.detail);
        }
    }

    void show(List<SearchEngine.Hit> newHits, int codeBits) {
        hits.clear();
        hits.addAll(newHits);
        bits = Math.max(1, codeBits);
        notifyDataSetChanged();
    }

    @NonNull
    @Override
    public Holder onCreateViewHolder(@NonNull ViewGroup parent, int viewType) {
        return new Holder(LayoutInflater.from(parent.getContext()).inflate(R.layout.item_result, parent, false));
    }

    @Override
    public void onBindViewHolder(@NonNull Holder h, int position) {
        SearchEngine.Hit hit = hits.get(position);
        h.distance.setText(String.valueOf(hit.distance));
        h.sentence.setText(hit.sentence);
        h.detail.setText(h.itemView.getContext().getString(R.string.result_detail, position + 1, hit.row,
                String.format(Locale.ROOT, "%.1f", 100.0 * (bits - hit.distance) / bits)));
    }

    @Override
    public int getItemCount() {
        return hits.size();
    }
}
