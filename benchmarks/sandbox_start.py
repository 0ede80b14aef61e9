"""Start-up cost of a sandboxed run per network mode, and the api relay's throughput.

    python benchmarks/sandbox_start.py [--runs 10]

Prints the median and range of `LocalProvider.run` wall time for `true` under isolation "none",
bwrap with network "none", and bwrap with network "api" (two endpoints, so the in-sandbox relay
starts); then the time to fetch 64 MiB through the relay from a local HTTP server.
"""
from __future__ import annotations

import argparse
import http.server
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sweep.providers.base import ExecSpec  # noqa: E402
from sweep.providers.local import LocalProvider  # noqa: E402

BLOB = b"x" * (64 << 20)


class Blob(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(BLOB)))
        self.end_headers()
        self.wfile.write(BLOB)

    def log_message(self, *args):
        pass


def timed(provider, spec_kw, runs):
    out = []
    for _ in range(runs):
        started = time.monotonic()
        result = provider.run(ExecSpec(**spec_kw))
        assert result.rc == 0, (result.stderr_tail, result.stdout_tail)
        out.append(time.monotonic() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Blob)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_port
    ws = Path(tempfile.mkdtemp(dir="/var/tmp"))
    base = {"argv": ["true"], "cwd": ws, "timeout_s": 60}
    cases = [("isolation none", LocalProvider(isolation="none"), {}),
             ("bwrap, network none", LocalProvider(), {"network": "none"}),
             ("bwrap, network api (2 endpoints)", LocalProvider(),
              {"network": "api", "endpoints": (f"127.0.0.1:{port}", f"fake.test:443=127.0.0.1:{port}")})]
    for name, provider, extra in cases:
        times = timed(provider, {**base, **extra}, runs)
        print(f"{name:<36} median {statistics.median(times) * 1000:6.0f} ms  "
              f"range {min(times) * 1000:.0f}-{max(times) * 1000:.0f} ms  ({runs} runs)")
    fetch = ["python3", "-c", f"import urllib.request, time; t = time.monotonic(); "
             f"n = len(urllib.request.urlopen('http://127.0.0.1:{port}/').read()); "
             f"print(n, time.monotonic() - t)"]
    result = LocalProvider().run(ExecSpec(argv=fetch, cwd=ws, timeout_s=120, network="api",
                                          endpoints=(f"127.0.0.1:{port}",)))
    size, seconds = result.stdout_tail.split()
    print(f"64 MiB through the api relay: {float(seconds):.2f} s ({int(size) / float(seconds) / (1 << 20):.0f} MiB/s)")
    server.shutdown()


if __name__ == "__main__":
    main()
