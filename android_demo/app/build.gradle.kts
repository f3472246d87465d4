plugins {
    id("com.android.application")
}

android {
    namespace = "ai.ondevice.demo"
    compileSdk = 34

    defaultConfig {
        applicationId = "ai.ondevice.demo"
        minSdk = 24
        targetSdk = 34
        versionCode = 1
        versionName = "0.1.0"
    }

    buildTypes {
        release {
            isMinifyEnabled = false
            proguardFiles(getDefaultProguardFile("proguard-android-optimize.txt"), "proguard-rules.pro")
        }
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_1_8
        targetCompatibility = JavaVersion.VERSION_1_8
    }

    androidResources {
        // Keep model and code files uncompressed in the APK: faster to load, and they barely compress anyway.
        noCompress += listOf("onnx", "npy", "safetensors")
    }
}

dependencies {
    implementation(project(":core"))
    // ONNX Runtime for Android (Java API + native libraries for arm64-v8a, armeabi-v7a, x86, x86_64).
    implementation("com.microsoft.onnxruntime:onnxruntime-android:1.20.0")
    implementation("androidx.appcompat:appcompat:1.7.0")
    implementation("androidx.recyclerview:recyclerview:1.3.2")
}
