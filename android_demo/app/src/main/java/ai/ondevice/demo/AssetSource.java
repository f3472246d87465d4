package ai.ondevice.demo;

import android.content.res.AssetManager;

import java.io.IOException;
import java.io.InputStream;

import ai.ondevice.core.FileSource;

/** A {@link FileSource} over the APK's assets: bundle files live under {@code assets/<folder>/}. */
final class AssetSource implements FileSource {
    private final AssetManager assets;
    private final String folder;

    AssetSource(AssetManager assets, String folder) {
        this.assets = assets;
        this.folder = folder;
    }

    @Override
    public InputStream open(String name) throws IOException {
        // AssetManager throws FileNotFoundException for a missing asset, which the bundle reader reports clearly.
        return assets.open(folder + "/" + name);
    }

    @Override
    public String describe() {
        return "assets/" + folder;
    }

    /** Whether {@code assets/<folder>/<name>} exists. */
    boolean exists(String name) {
        try {
            assets.open(folder + "/" + name).close();
            return true;
        } catch (IOException e) {
            return false;
        }
    }
}
