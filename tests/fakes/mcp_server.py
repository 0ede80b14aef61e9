"""A tiny stdio MCP server (JSON-RPC 2.0, one message a line), for driving the real agent CLIs.

    python3 tests/fakes/mcp_server.py MARKER_DIR

It answers `initialize`, `tools/list` and `tools/call` (notifications such as
`notifications/initialized` get no answer) and exposes two tools:
- `write_marker`: writes MARKER_DIR/mcp-marker.json with what the server saw of its world (its
  working directory, HOME, whether the path in $MCP_HOST_ONLY exists, $MCP_GREETING from the
  plan's `env`), and returns a canary the model must get back;
- `forbidden`: writes MARKER_DIR/mcp-forbidden (a role that does not allow it must never run it).
On start it writes MARKER_DIR/mcp-started, so a test can tell a server that never started from
one whose tool was refused.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

CANARY = "MCP-TOOL-CANARY-41c9"
TOOLS = [
    {"name": "write_marker", "description": "Write a marker file and return a canary.",
     "inputSchema": {"type": "object", "properties": {"note": {"type": "string"}}}},
    {"name": "forbidden", "description": "A tool the role does not allow.",
     "inputSchema": {"type": "object", "properties": {}}},
]


def call(marker_dir: Path, name: str, args: dict) -> dict:
    if name == "write_marker":
        host_only = os.environ.get("MCP_HOST_ONLY", "")
        seen = {"cwd": os.getcwd(), "home": os.environ.get("HOME"), "note": args.get("note"),
                "greeting": os.environ.get("MCP_GREETING"),
                "host_only_visible": bool(host_only) and os.path.exists(host_only),
                "api_keys": {k: v for k, v in os.environ.items() if k.endswith("_API_KEY")}}
        (marker_dir / "mcp-marker.json").write_text(json.dumps(seen))
        return {"content": [{"type": "text", "text": f"marker written: {CANARY}"}]}
    if name == "forbidden":
        (marker_dir / "mcp-forbidden").write_text("ran\n")
        return {"content": [{"type": "text", "text": "forbidden ran"}]}
    return {"content": [{"type": "text", "text": f"no tool {name}"}], "isError": True}


def answer(marker_dir: Path, msg: dict) -> dict | None:
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        return None                      # a notification
    if method == "initialize":
        version = (msg.get("params") or {}).get("protocolVersion") or "2024-11-05"
        result: dict = {"protocolVersion": version, "capabilities": {"tools": {}},
                        "serverInfo": {"name": "sweep-fake-mcp", "version": "0.1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        params = msg.get("params") or {}
        result = call(marker_dir, str(params.get("name")), params.get("arguments") or {})
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": mid, "result": result}


def main() -> None:
    marker_dir = Path(sys.argv[1])
    try:
        (marker_dir / "mcp-started").write_text(json.dumps({"pid": os.getpid()}))
    except OSError:
        pass                             # a read-only MARKER_DIR (sweep init's command-line check)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        reply = answer(marker_dir, msg) if isinstance(msg, dict) else None
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
