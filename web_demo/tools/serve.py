"""A bounded static file server on 127.0.0.1 for the web demo (tests, benchmarks, trying the page).

    .venv/bin/python web_demo/tools/serve.py web_demo/site [--port 8000] [--seconds 3600]

It serves files only (no server logic), sets the MIME types ES modules and WebAssembly need, and sends the
cross-origin isolation headers so the page's performance.now() has fine resolution. It stops by itself after
--seconds; from Python, `with serve(root) as url:` stops it when the block ends.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

TYPES = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json",
         ".jsonl": "text/plain; charset=utf-8", ".txt": "text/plain; charset=utf-8", ".npy": "application/octet-stream",
         ".onnx": "application/octet-stream", ".html": "text/html; charset=utf-8", ".css": "text/css"}


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {**http.server.SimpleHTTPRequestHandler.extensions_map, **TYPES}

    def end_headers(self) -> None:
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args) -> None:
        pass


@contextlib.contextmanager
def serve(root: str | Path, port: int = 0, seconds: float = 600.0) -> Iterator[str]:
    """Serve `root` on 127.0.0.1 (port 0: any free one) in a thread; yields the base URL; stops after `seconds`."""
    handler = functools.partial(_Handler, directory=str(Path(root).resolve()))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    timer = threading.Timer(seconds, server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        timer.cancel()
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root", type=Path, help="site folder written by tools/make_catalog.py")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--seconds", type=float, default=3600.0, help="stop after this many seconds")
    a = p.parse_args(argv)
    if not (a.root / "index.html").is_file():
        print(f"error: {a.root} has no index.html; build the site with web_demo/tools/make_catalog.py", file=sys.stderr)
        return 2
    with serve(a.root, a.port, a.seconds) as url:
        print(f"serving {a.root} at {url} for {a.seconds:.0f} s (Ctrl-C stops)", flush=True)
        try:
            threading.Event().wait(a.seconds)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
