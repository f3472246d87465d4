package ai.ondevice.core;

import java.util.Arrays;

/**
 * Which rows a search may return, as Python's {@code ondevice.index.Filter}: every bit of {@code tagsAll}, at least
 * one bit of {@code tagsAny} (0: no condition) and a category among {@code categories} (null: any category).
 */
public final class Filter {
    final long tagsAll;
    final long tagsAny;
    private final int[] categories; // sorted, or null

    public Filter(long tagsAll, long tagsAny, int[] categories) {
        this.tagsAll = tagsAll;
        this.tagsAny = tagsAny;
        if (categories == null) {
            this.categories = null;
        } else {
            this.categories = categories.clone();
            Arrays.sort(this.categories);
        }
    }

    /** Whether a row with this 64-bit tag mask and category is allowed. */
    public boolean allows(long tags, int category) {
        if ((tags & tagsAll) != tagsAll) {
            return false;
        }
        if (tagsAny != 0 && (tags & tagsAny) == 0) {
            return false;
        }
        return categories == null || Arrays.binarySearch(categories, category) >= 0;
    }
}
