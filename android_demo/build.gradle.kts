// Top-level build file: plugin versions only; each module configures itself.
plugins {
    id("com.android.application") version "8.5.2" apply false
}
