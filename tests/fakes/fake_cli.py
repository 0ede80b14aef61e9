#!/usr/bin/python3
"""A CLI-shaped agent for the runtime registry test (tests/test_runtime_registry.py): stdlib only,
so it runs inside the sandbox with the system python.

    fake_cli.py --version
    fake_cli.py --base-url URL --output PATH [--max-turns N] [--tools T] < prompt

It prints one JSON event per line: `start`, then asks the endpoint (one line out, one JSON line
back) and prints `result` with its cost and turns, writing the endpoint's answer to PATH; an
endpoint it cannot reach (or that answers nothing) prints an `error` event with class `outage`
and exits 1.
"""
import argparse
import json
import socket
import sys
from urllib.parse import urlsplit

VERSION = "1.4.2"


def main() -> int:
    if sys.argv[1:] == ["--version"]:
        print(f"fake-cli {VERSION}")
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--max-turns")
    ap.add_argument("--tools")
    args = ap.parse_args()
    prompt = sys.stdin.read()
    print(json.dumps({"type": "start", "prompt_chars": len(prompt)}), flush=True)
    # what a tool printed while it worked (text an outage regex matches, which is no outage of ours)
    print(json.dumps({"type": "tool_output", "text": "GET /health -> 503 Service Unavailable"}), flush=True)
    url = urlsplit(args.base_url)
    try:
        with socket.create_connection((url.hostname, url.port or 80), timeout=10) as conn:
            conn.sendall(b"judge\n")
            answer = conn.makefile("rb").readline()
    except OSError as exc:
        answer, why = b"", f"unreachable: {exc}"
    else:
        why = "the endpoint closed the connection without an answer"
    if not answer.strip():      # (the sandbox's relay accepts, then closes when the host refuses)
        print(json.dumps({"type": "error", "class": "outage", "message": why}), flush=True)
        return 1
    with open(args.output, "wb") as fh:
        fh.write(answer)
    print(json.dumps({"type": "result", "cost_usd": 0.02, "turns": 1}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
