// The pure-Java core: no dependencies, Java 8 bytecode and APIs so it runs on every Android from API 24.
// On a machine without Gradle the same sources are compiled and checked by tests/test_android_parity.py (javac).
plugins {
    `java-library`
}

java {
    sourceCompatibility = JavaVersion.VERSION_1_8
    targetCompatibility = JavaVersion.VERSION_1_8
}

tasks.withType<JavaCompile>().configureEach {
    options.encoding = "UTF-8"
    options.release.set(8) // Java 8 APIs only: what Android API 24 offers
    // -options: newer JDKs warn that release 8 is obsolete; that warning must not fail the build.
    options.compilerArgs.addAll(listOf("-Xlint:all", "-Xlint:-options", "-Werror"))
}

// src/test/java holds plain Java mains (no JUnit): unit checks, the golden parity check and the benchmark.
val testClasspath = sourceSets["test"].runtimeClasspath

// ./gradlew :core:coreTests [-Pbundle=/path/to/bundle]   (bad-bundle checks run only with a bundle)
val coreTests by tasks.registering(JavaExec::class) {
    group = "verification"
    description = "Tokenizer, JSON, Hamming and bundle-reader checks."
    classpath = testClasspath
    mainClass.set("ai.ondevice.core.CoreTests")
    args(listOfNotNull(project.findProperty("bundle")?.toString()))
}
tasks.named("check") { dependsOn(coreTests) }

// ./gradlew :core:parityCheck -Pbundle=/path/to/bundle   (a bundle from `ondevice export --golden --with-weights`)
tasks.register<JavaExec>("parityCheck") {
    group = "verification"
    description = "Token ids, Hamming top-10 and the Java forward pass against the bundle's golden files."
    classpath = testClasspath
    mainClass.set("ai.ondevice.core.ParityCheck")
    args(project.findProperty("bundle")?.toString() ?: "bundle")
}

// ./gradlew :core:benchmark
tasks.register<JavaExec>("benchmark") {
    group = "verification"
    description = "Single-sentence encode latency and Hamming top-10 over 100k codes on this JVM."
    classpath = testClasspath
    mainClass.set("ai.ondevice.core.Benchmark")
}
