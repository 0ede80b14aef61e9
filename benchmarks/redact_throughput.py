#!/usr/bin/env python
"""What redaction costs: sweep/redact.py's throughput on transcripts and bundle files.

Every transcript byte passes through a Redactor (base64 at 3 alignments, std and urlsafe, hex,
URL-encoding, each tolerant of whitespace between characters), and every bundle is scanned before
it is installed. This prints MB/s for:
- `scrub_bytes` on ordinary text (no secret present: the common case) and on random bytes;
- the streaming path (`feed` in 64 KiB chunks, as a session's stdout pump does);
- `files_with_secrets` over a tree of small files (a bundle's repository copy);
with 1 and with 4 registered secrets, and without any (the path oracle/nop campaigns take).

Usage (from the repository root):
    .venv/bin/python benchmarks/redact_throughput.py            # 32 MiB of each input
    .venv/bin/python benchmarks/redact_throughput.py --mib 128
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sweep.redact import Redactor  # noqa: E402


def rate(mib: float, seconds: float) -> str:
    return f"{mib / seconds:8.1f} MB/s" if seconds > 0 else "     inf"


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32)
    args = parser.parse_args()
    size = args.mib << 20
    line = b"running tests/test_mathx.py::test_clamp ... ok (0.01s) some ordinary log line\n"
    text = (line * (size // len(line) + 1))[:size]
    noise = os.urandom(size)
    with tempfile.TemporaryDirectory(dir=REPO / ".scratch" if (REPO / ".scratch").is_dir() else None) as tmp:
        tree = Path(tmp) / "tree"
        for i in range(2000):
            d = tree / f"pkg{i // 100}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"mod{i}.py").write_bytes(text[i * 4000:(i + 1) * 4000])
        tree_mib = 2000 * 4000 / (1 << 20)
        print(f"input: {args.mib} MiB text, {args.mib} MiB random, a tree of 2000 files ({tree_mib:.1f} MiB)")
        for count in (0, 1, 4):
            secrets = ["sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex for _ in range(count)]
            red = Redactor(secrets, include_registered=False)

            def stream(secrets=secrets):
                r = Redactor(secrets, include_registered=False)
                for i in range(0, size, 65536):
                    r.feed(text[i:i + 65536])
                r.flush()

            print(f"{count} secret(s): scrub text {rate(args.mib, timed(lambda red=red: red.scrub_bytes(text)))}, "
                  f"random {rate(args.mib, timed(lambda red=red: red.scrub_bytes(noise)))}, "
                  f"stream {rate(args.mib, timed(stream))}, "
                  f"tree scan {rate(tree_mib, timed(lambda red=red: red.files_with_secrets(tree)))}")
        shutil.rmtree(tree, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
