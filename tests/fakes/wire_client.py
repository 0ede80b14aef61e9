"""A tiny agent CLI for the command runtime's relayed sessions (`protocol = "anthropic"`).

It makes N streamed Messages API requests to $ANTHROPIC_BASE_URL with $ANTHROPIC_API_KEY (what the
session gives it: the relay's address and a placeholder), reads each answer to its end, stops at
the first refused one, and then writes its whole environment to repo/env.txt in the workspace
(what the session could have sent anywhere).

    wire_client.py N WORKSPACE [ignored...]
"""
import http.client
import json
import os
import sys
import urllib.parse


def main() -> int:
    n, workspace = int(sys.argv[1]), sys.argv[2]
    base = urllib.parse.urlsplit(os.environ["ANTHROPIC_BASE_URL"])
    key = os.environ.get("ANTHROPIC_API_KEY", "")
    messages = [{"role": "user", "content": "go"}]
    for i in range(n):
        conn = http.client.HTTPConnection(base.hostname, base.port or 80, timeout=60)
        body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": True, "messages": messages,
                           "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]})
        conn.request("POST", base.path.rstrip("/") + "/v1/messages", body,
                     {"content-type": "application/json", "x-api-key": key, "anthropic-version": "2023-06-01"})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        print(f"request {i + 1}: HTTP {resp.status}, {len(data)} bytes", flush=True)
        if resp.status != 200:
            break
        messages += [{"role": "assistant", "content": "step"}, {"role": "user", "content": "more"}]
    with open(os.path.join(workspace, "repo", "env.txt"), "w") as fh:
        fh.write("\n".join(f"{k}={v}" for k, v in sorted(os.environ.items())) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
