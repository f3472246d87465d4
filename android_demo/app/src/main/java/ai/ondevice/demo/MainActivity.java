package ai.ondevice.demo;

import android.os.Bundle;
import android.os.Handler;
import android.os.Looper;
import android.view.KeyEvent;
import android.view.View;
import android.view.inputmethod.EditorInfo;
import android.view.inputmethod.InputMethodManager;
import android.widget.Button;
import android.widget.EditText;
import android.widget.ProgressBar;
import android.widget.RadioButton;
import android.widget.RadioGroup;
import android.widget.TextView;

import androidx.appcompat.app.AppCompatActivity;
import androidx.recyclerview.widget.DividerItemDecoration;
import androidx.recyclerview.widget.LinearLayoutManager;
import androidx.recyclerview.widget.RecyclerView;

import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * Type a sentence; it is encoded on the device (ONNX Runtime or the pure-Java core), its binary code is compared
 * with every code in the shipped catalog by Hamming distance, and the 10 nearest sentences are listed with their
 * distances and the encode/search latency.
 */
public class MainActivity extends AppCompatActivity {
    private static final int TOP_K = 10;

    private final ExecutorService worker = Executors.newSingleThreadExecutor();
    private final Handler main = new Handler(Looper.getMainLooper());
    private SearchEngine engine;

    private EditText query;
    private Button searchButton;
    private RadioGroup encoderChoice;
    private RadioButton javaChoice;
    private TextView status;
    private TextView latency;
    private ProgressBar progress;
    private ResultAdapter results;
    private View pairSection;
    private EditText pairA;
    private EditText pairB;
    private Button compareButton;
    private TextView pairResult;

    @Override
    protected void onCreate(Bundle savedInstanceState) {
        super.onCreate(savedInstanceState);
        setContentView(R.layout.activity_main);
        query = findViewById(R.id.query);
        searchButton = findViewById(R.id.search);
        encoderChoice = findViewById(R.id.encoder_choice);
        javaChoice = findViewById(R.id.encoder_java);
        status = findViewById(R.id.status);
        latency = findViewById(R.id.latency);
        progress = findViewById(R.id.progress);
        pairSection = findViewById(R.id.pair_section);
        pairA = findViewById(R.id.pair_a);
        pairB = findViewById(R.id.pair_b);
        compareButton = findViewById(R.id.compare);
        pairResult = findViewById(R.id.pair_result);
        compareButton.setOnClickListener(new View.OnClickListener() {
            @Override
            public void onClick(View v) {
                compare();
            }
        });

        RecyclerView list = findViewById(R.id.results);
        list.setLayoutManager(new LinearLayoutManager(this));
        list.addItemDecoration(new DividerItemDecoration(this, DividerItemDecoration.VERTICAL));
        results = new ResultAdapter();
        list.setAdapter(results);

        searchButton.setOnClickListener(new View.OnClickListener() {
            @Override
            public void onClick(View v) {
                search();
            }
        });
        query.setOnEditorActionListener(new TextView.OnEditorActionListener() {
            @Override
            public boolean onEditorAction(TextView v, int actionId, KeyEvent event) {
                boolean enter = event != null && event.getKeyCode() == KeyEvent.KEYCODE_ENTER
                        && event.getAction() == KeyEvent.ACTION_DOWN;
                if (actionId == EditorInfo.IME_ACTION_SEARCH || enter) {
                    search();
                    return true;
                }
                return false;
            }
        });
        setBusy(true);
        status.setText(R.string.status_loading);
        worker.execute(new Runnable() {
            @Override
            public void run() {
                loadEngine();
            }
        });
    }

    /** Background: verify and load the bundle and catalog, then enable the search box. */
    private void loadEngine() {
        try {
            final SearchEngine loaded = SearchEngine.load(getApplicationContext());
            main.post(new Runnable() {
                @Override
                public void run() {
                    if (isFinishing() || isDestroyed()) {
                        worker.execute(new Runnable() {
                            @Override
                            public void run() {
                                loaded.close(); // the screen went away while loading: free the ONNX session
                            }
                        });
                        return;
                    }
                    engine = loaded;
                    status.setText(getString(R.string.status_ready, loaded.describe()));
                    javaChoice.setEnabled(loaded.java != null);
                    if (loaded.java == null) {
                        javaChoice.setText(R.string.encoder_java_unavailable);
                    }
                    pairSection.setVisibility(loaded.canCompare() ? View.VISIBLE : View.GONE);
                    setBusy(false);
                    query.requestFocus();
                }
            });
        } catch (final Exception e) {
            main.post(new Runnable() {
                @Override
                public void run() {
                    progress.setVisibility(View.GONE);
                    status.setText(getString(R.string.status_error, e.getMessage()));
                }
            });
        }
    }

    private void search() {
        final String text = query.getText().toString();
        if (engine == null || text.trim().isEmpty()) {
            return;
        }
        hideKeyboard();
        setBusy(true);
        final boolean useJava = encoderChoice.getCheckedRadioButtonId() == R.id.encoder_java;
        final SearchEngine current = engine;
        worker.execute(new Runnable() {
            @Override
            public void run() {
                try {
                    final SearchEngine.Result r = current.search(text, useJava, TOP_K);
                    main.post(new Runnable() {
                        @Override
                        public void run() {
                            results.show(r.hits, current.bundle.bits());
                            String shown = String.format(Locale.ROOT, getString(R.string.latency_format), r.encoder,
                                    r.encodeMs, r.tokens, r.searchMs, current.catalog.size());
                            if (r.rerankMs >= 0) {
                                shown += String.format(Locale.ROOT, getString(R.string.rerank_format),
                                        SearchEngine.SHORTLIST, r.rerankMs);
                            }
                            latency.setText(shown);
                            setBusy(false);
                        }
                    });
                } catch (final RuntimeException e) {
                    main.post(new Runnable() {
                        @Override
                        public void run() {
                            latency.setText(getString(R.string.status_error, e.getMessage()));
                            setBusy(false);
                        }
                    });
                }
            }
        });
    }

    /** Both sentences encoded and scored by the bundle's pair head, off the main thread. */
    private void compare() {
        final String a = pairA.getText().toString();
        final String b = pairB.getText().toString();
        if (engine == null || !engine.canCompare()) {
            return;
        }
        hideKeyboard();
        setBusy(true);
        final SearchEngine current = engine;
        worker.execute(new Runnable() {
            @Override
            public void run() {
                String text;
                try {
                    SearchEngine.PairResult r = current.compare(a, b);
                    String verdict = r.decision == null ? "" : getString(r.decision ? R.string.pair_positive : R.string.pair_negative);
                    text = String.format(Locale.ROOT, getString(R.string.pair_result_format), verdict, r.score, r.key, r.ms);
                } catch (RuntimeException e) {
                    text = getString(R.string.status_error, e.getMessage());
                }
                final String shown = text;
                main.post(new Runnable() {
                    @Override
                    public void run() {
                        pairResult.setText(shown);
                        setBusy(false);
                    }
                });
            }
        });
    }

    private void setBusy(boolean busy) {
        progress.setVisibility(busy ? View.VISIBLE : View.GONE);
        searchButton.setEnabled(!busy && engine != null);
        compareButton.setEnabled(!busy && engine != null && engine.canCompare());
    }

    private void hideKeyboard() {
        InputMethodManager imm = (InputMethodManager) getSystemService(INPUT_METHOD_SERVICE);
        if (imm != null) {
            imm.hideSoftInputFromWindow(query.getWindowToken(), 0);
        }
    }

    @Override
    protected void onDestroy() {
        super.onDestroy();
        final SearchEngine toClose = engine;
        engine = null;
        if (toClose != null) {
            worker.execute(new Runnable() {
                @Override
                public void run() {
                    toClose.close();
                }
            });
        }
        worker.shutdown(); // queued work (a search in flight, the close above) still runs, then the thread ends
    }
}
