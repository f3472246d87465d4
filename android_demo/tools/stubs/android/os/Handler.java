package android.os; public class Handler { public Handler(Looper l){} public final boolean post(Runnable r){return true;} }
