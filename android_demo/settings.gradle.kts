// ondevice Android demo: an app that embeds an exported ondevice bundle, plus the pure-Java core it uses.
// Open this folder (android_demo/) in Android Studio. See README.md for what to install and the build steps.
pluginManagement {
    repositories {
        google()
        mavenCentral()
        gradlePluginPortal()
    }
}

dependencyResolutionManagement {
    repositoriesMode.set(RepositoriesMode.FAIL_ON_PROJECT_REPOS)
    repositories {
        google()
        mavenCentral() // com.microsoft.onnxruntime:onnxruntime-android is published here
    }
}

rootProject.name = "ondevice-android-demo"
include(":core", ":app")
