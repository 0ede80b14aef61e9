"""A local fake of Daytona's REST API, enough for the real `daytona` SDK's whole sandbox flow.

It speaks the endpoints the SDK calls (measured, see docs/providers.md): create, get, list by
labels, delete under `/api`, and execute, bulk-upload, bulk-download under `/toolbox/<id>` (each
sandbox's `toolboxProxyUrl` points back here). A "sandbox" is a private directory on this host;
`process/execute` runs the command with bash in it. It is a FAKE: no container, no isolation, no
image build (the Dockerfile content is recorded, not built).

Images: `POST /api/snapshots` records a snapshot build (`snapshot_builds`, the Dockerfile text of
each) and answers it active at once; a sandbox created from a snapshot records which one
(`sandbox_images`). With `container=True` every command runs under bubblewrap in a root of its
own standing for the container: the host's /usr, /etc (read-only) as the image's toolchain, and
the sandbox's directory tree at `/` for everything else (`/sweep/...` is `<sandbox dir>/sweep/...`),
so absolute paths mean what they would in the container, the host's files are out of reach, and
a sandbox created with `networkBlockAll` has no network. A `networkAllowList` is recorded and
echoed, NOT enforced (the sandbox keeps the host's network): tests assert what was asked.

Faults are scripted per request: `fail(status, times, path_contains)` answers the next matching
requests with that HTTP status (429, 503, 401, ...). A wrong bearer token is always a 401.
"""
from __future__ import annotations

import email.parser
import email.policy
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse


class FakeDaytona:
    def __init__(self, api_key: str = "fake-daytona-key", *, container: bool = False) -> None:
        self.api_key = api_key
        self.container = container
        self.snapshots: dict[str, dict] = {}                # name -> snapshot dto
        self.snapshot_builds: list[str] = []                 # Dockerfile text of every snapshot built
        self.sandbox_images: dict[str, str | None] = {}     # sandbox id -> snapshot it was created from
        self.execs: list[tuple[str, str, str]] = []          # (sandbox id, cwd, command) as received
        self.sandboxes: dict[str, dict] = {}
        self.roots: dict[str, Path] = {}
        self.builds: dict[str, str | None] = {}             # sandbox id -> Dockerfile content it was created from
        self.requests: list[tuple[str, str, dict | None]] = []   # (method, path, json body)
        self.faults: list[dict] = []
        self.sessions: dict[tuple[str, str], dict] = {}     # (sandbox, session) -> command id -> process
        self.killed: list[str] = []                          # commands a session delete had to kill
        self.lock = threading.Lock()
        self.base = Path(tempfile.mkdtemp(prefix="fake-daytona-"))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def start(self) -> FakeDaytona:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.base, ignore_errors=True)

    def fail(self, status: int, times: int = 1, path_contains: str = "") -> None:
        with self.lock:
            self.faults.append({"status": status, "times": times, "path": path_contains})

    def live(self) -> list[dict]:
        with self.lock:
            return [dict(s) for s in self.sandboxes.values()]

    def add_foreign(self, name: str, labels: dict[str, str]) -> str:
        """A sandbox someone else created (another campaign, by hand): reconcile must leave it."""
        return self._create({"name": name, "labels": labels, "env": {}})["id"]

    # --- the API -------------------------------------------------------------------------------

    def _dto(self, sid: str, body: dict) -> dict:
        return {
            "id": sid, "organizationId": "org-fake", "name": body.get("name") or sid, "user": "root",
            "env": body.get("env") or {}, "labels": body.get("labels") or {}, "public": False,
            "networkBlockAll": bool(body.get("networkBlockAll")), "networkAllowList": body.get("networkAllowList"),
            "kvm": False, "target": body.get("target") or "us",
            "cpu": body.get("cpu") or 1, "gpu": body.get("gpu") or 0, "memory": body.get("memory") or 1,
            "disk": body.get("disk") or 3, "state": "started",
            "autoStopInterval": body.get("autoStopInterval"), "autoDeleteInterval": body.get("autoDeleteInterval"),
            "toolboxProxyUrl": f"http://127.0.0.1:{self.port}/toolbox",
        }

    def _create_snapshot(self, body: dict) -> dict:
        with self.lock:
            name = body.get("name") or ""
            if name in self.snapshots:
                raise _Http(409, f"snapshot {name} already exists")
            build = body.get("buildInfo") or {}
            now = "2026-01-01T00:00:00Z"
            dto = {"id": uuid.uuid4().hex, "organizationId": "org-fake", "general": False, "name": name,
                   "imageName": body.get("imageName"), "state": "active", "size": 1, "entrypoint": None,
                   "cpu": body.get("cpu") or 1, "gpu": body.get("gpu") or 0, "mem": body.get("memory") or 1,
                   "disk": body.get("disk") or 3, "errorReason": None, "createdAt": now, "updatedAt": now,
                   "lastUsedAt": None, "sourceSandboxId": None,
                   "buildInfo": {"dockerfileContent": build.get("dockerfileContent") or "",
                                 "contextHashes": build.get("contextHashes") or [], "createdAt": now,
                                 "updatedAt": now, "snapshotRef": name}}
            self.snapshots[name] = dto
            self.snapshot_builds.append(build.get("dockerfileContent") or body.get("imageName") or "")
            return dto

    def _get_snapshot(self, id_or_name: str) -> dict:
        with self.lock:
            for s in self.snapshots.values():
                if s["id"] == id_or_name or s["name"] == id_or_name:
                    return s
        raise _Http(404, f"snapshot {id_or_name} not found")

    def _create(self, body: dict) -> dict:
        with self.lock:
            name = body.get("name")
            if name and any(s["name"] == name for s in self.sandboxes.values()):
                raise _Http(409, "sandbox with this name already exists")
            if body.get("snapshot") and body["snapshot"] not in self.snapshots:
                raise _Http(400, f"snapshot {body['snapshot']} not found")
            sid = uuid.uuid4().hex[:16]
            dto = self._dto(sid, body)
            self.sandboxes[sid] = dto
            self.builds[sid] = (body.get("buildInfo") or {}).get("dockerfileContent")
            self.sandbox_images[sid] = body.get("snapshot")
            root = self.base / sid
            root.mkdir()
            self.roots[sid] = root
            return dto

    def _find(self, id_or_name: str) -> dict:
        for s in self.sandboxes.values():
            if s["id"] == id_or_name or s["name"] == id_or_name:
                return s
        raise _Http(404, f"sandbox {id_or_name} not found")

    def _path(self, sid: str, remote: str) -> Path:
        root = self.roots[sid]
        p = (root / remote.lstrip("/")).resolve()
        if root.resolve() not in p.parents and p != root.resolve():
            raise _Http(400, "path escapes the sandbox")
        return p

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def _send(self, status: int, payload: object = None, *, raw: bytes | None = None,
                      ctype: str = "application/json") -> None:
                data = raw if raw is not None else json.dumps(payload if payload is not None else {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _dispatch(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlparse(self.path)
                jbody = None
                if body and "json" in (self.headers.get("Content-Type") or ""):
                    jbody = json.loads(body)
                with fake.lock:
                    fake.requests.append((method, url.path, jbody))
                    fault = next((f for f in fake.faults if f["times"] > 0 and f["path"] in url.path), None)
                    if fault:
                        fault["times"] -= 1
                if url.path.startswith("/api/socket.io"):
                    return self._send(404, {"message": "no event stream in the fake"})
                if fault:
                    return self._send(fault["status"], {"statusCode": fault["status"],
                                                         "message": f"fake fault {fault['status']}",
                                                         "code": "FAKE_FAULT"})
                if self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    return self._send(401, {"statusCode": 401, "message": "Unauthorized"})
                try:
                    status, payload, raw, ctype = fake._route(method, url.path, parse_qs(url.query), jbody,
                                                              body, self.headers.get("Content-Type") or "")
                except _Http as e:
                    return self._send(e.status, {"statusCode": e.status, "message": e.message})
                self._send(status, payload, raw=raw, ctype=ctype)

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def do_DELETE(self) -> None:
                self._dispatch("DELETE")

            def do_PUT(self) -> None:
                self._dispatch("PUT")

        return H

    def _route(self, method: str, path: str, query: dict, jbody: dict | None, body: bytes, ctype: str):
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "snapshots"]:
            if method == "POST" and len(parts) == 2:
                return 200, self._create_snapshot(jbody or {}), None, "application/json"
            if method == "GET" and len(parts) == 3:
                return 200, self._get_snapshot(parts[2]), None, "application/json"
        if parts[:2] == ["api", "sandbox"]:
            if method == "POST" and len(parts) == 2:
                return 200, self._create(jbody or {}), None, "application/json"
            if method == "GET" and len(parts) == 2:
                want = json.loads(query.get("labels", ["{}"])[0])
                with self.lock:
                    items = [s for s in self.sandboxes.values()
                             if all(s["labels"].get(k) == v for k, v in want.items())]
                return 200, {"items": items, "total": len(items), "page": 1, "totalPages": 1,
                             "nextCursor": None}, None, "application/json"
            if len(parts) == 3:
                with self.lock:
                    s = self._find(parts[2])
                    if method == "GET":
                        return 200, s, None, "application/json"
                    if method == "DELETE":
                        del self.sandboxes[s["id"]]
                        shutil.rmtree(self.roots.pop(s["id"]), ignore_errors=True)
                        return 200, dict(s, state="destroyed"), None, "application/json"
        if parts[:1] == ["toolbox"] and len(parts) >= 3:
            sid = parts[1]
            with self.lock:
                if sid not in self.sandboxes:
                    raise _Http(404, f"sandbox {sid} not found")
            op = "/".join(parts[2:])
            if op == "process/execute" and method == "POST":
                return 200, self._execute(sid, jbody or {}), None, "application/json"
            if op == "files/folder" and method == "POST":
                self._path(sid, query["path"][0]).mkdir(parents=True, exist_ok=True)
                return 201, None, b"", "application/json"
            if op.startswith("process/session"):
                return self._session(sid, method, parts[4:], jbody or {})
            if op == "files/bulk-upload" and method == "POST":
                self._upload(sid, body, ctype)
                return 200, {}, None, "application/json"
            if op == "files/bulk-download" and method == "POST":
                raw, ct = self._download(sid, (jbody or {}).get("paths", []))
                return 200, None, raw, ct
        raise _Http(404, f"the fake does not serve {method} {path}")

    def _session(self, sid: str, method: str, rest: list[str], req: dict):
        """Sessions: create, run a command asynchronously (a real process group, output to a file),
        read its state and its logs, delete (kills what still runs)."""
        if not rest and method == "POST":
            with self.lock:
                self.sessions[(sid, req["sessionId"])] = {}
            return 201, None, b"", "application/json"
        key = (sid, rest[0]) if rest else None
        with self.lock:
            cmds = self.sessions.get(key) if key else None
        if cmds is None:
            raise _Http(404, "session not found")
        if len(rest) == 1 and method == "DELETE":
            with self.lock:
                del self.sessions[key]
            for c in cmds.values():
                if c["proc"].poll() is None:
                    os.killpg(c["proc"].pid, signal.SIGKILL)
                    c["proc"].wait()
                    self.killed.append(c["command"])
            return 204, None, b"", "application/json"
        if rest[1:] == ["exec"] and method == "POST":
            cmd_id = uuid.uuid4().hex
            log = self.base / f"log-{cmd_id}"
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.roots[sid]),
                   "SANDBOX_ROOT": str(self.roots[sid])}
            with open(log, "wb") as f:
                # no container here: an absolute `cd` (the provider's way to set the cwd) lands
                # under the sandbox's directory, through a `cd` function the command's shells inherit
                mapped = ('cd() { if [[ "$1" == /* ]]; then builtin cd "$SANDBOX_ROOT$1"; else builtin cd "$@"; fi; }; '
                          f"export -f cd; {req['command']}")
                argv = ["bash", "-c", mapped]
                if self.container:       # the command's own `cd /abs` is right inside the container root
                    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
                    argv = self.container_argv(sid, req["command"], "/")
                with self.lock:
                    self.execs.append((sid, "/", req["command"]))
                proc = subprocess.Popen(argv, cwd=self.roots[sid], env=env,
                                        stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            cmds[cmd_id] = {"proc": proc, "log": log, "command": req["command"]}
            if req.get("runAsync") or req.get("async"):
                return 200, {"cmdId": cmd_id}, None, "application/json"
            proc.wait()
            out = log.read_text(errors="replace")
            return 200, {"cmdId": cmd_id, "exitCode": proc.returncode, "output": out, "stdout": out,
                         "stderr": ""}, None, "application/json"
        if len(rest) >= 3 and rest[1] == "command" and rest[2] in cmds and method == "GET":
            c = cmds[rest[2]]
            if rest[3:] == ["logs"]:
                out = c["log"].read_text(errors="replace")
                return 200, {"output": out, "stdout": out, "stderr": ""}, None, "application/json"
            return 200, {"id": rest[2], "command": c["command"], "exitCode": c["proc"].poll()}, None, \
                "application/json"
        raise _Http(404, f"the fake does not serve {method} session {'/'.join(rest)}")

    def container_argv(self, sid: str, command: str, cwd: str) -> list[str]:
        """bwrap argv running `command` in the sandbox's own root (see the module docstring)."""
        root = self.roots[sid]
        argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-all", "--ro-bind", "/usr", "/usr",
                "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        if not self.sandboxes[sid].get("networkBlockAll"):
            argv.append("--share-net")
        for name in ("bin", "lib", "lib64", "sbin"):
            host = Path("/") / name
            if host.is_symlink():
                argv += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                argv += ["--ro-bind", str(host), f"/{name}"]
        system = {"usr", "etc", "proc", "dev", "tmp", "bin", "lib", "lib64", "sbin"}
        for entry in sorted(root.iterdir()):
            if entry.is_dir() and not entry.is_symlink() and entry.name not in system:
                argv += ["--bind", str(entry), f"/{entry.name}"]
        return argv + ["--chdir", cwd or "/", "--setenv", "HOME", "/tmp", "bash", "-c", command]

    def _execute(self, sid: str, req: dict) -> dict:
        cwd = self._path(sid, req.get("cwd") or "/")
        cwd.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.roots[sid]),
               "SANDBOX_ROOT": str(self.roots[sid])}
        env.update(req.get("envs") or req.get("env") or {})
        with self.lock:
            self.execs.append((sid, req.get("cwd") or "/", req["command"]))
        argv = ["bash", "-c", req["command"]]
        if self.container:
            env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
            argv = self.container_argv(sid, req["command"], req.get("cwd") or "/")
        try:
            p = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=req.get("timeout") or None)
            return {"exitCode": p.returncode, "result": p.stdout.decode("utf-8", "replace")}
        except subprocess.TimeoutExpired as e:
            return {"exitCode": -1, "result": (e.output or b"").decode("utf-8", "replace")}

    def _upload(self, sid: str, body: bytes, ctype: str) -> None:
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
        paths: dict[str, str] = {}
        files: dict[str, bytes] = {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            data = part.get_payload(decode=True) or b""
            if name.endswith(".path"):
                paths[name[: -len(".path")]] = data.decode()
            elif name.endswith(".file"):
                files[name[: -len(".file")]] = data
        for key, remote in paths.items():
            dest = self._path(sid, remote)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(files.get(key, b""))

    def _download(self, sid: str, paths: list[str]) -> tuple[bytes, str]:
        boundary = uuid.uuid4().hex
        out = bytearray()
        for remote in paths:
            p = self._path(sid, remote)
            if p.is_file():
                head = f'Content-Disposition: form-data; name="file"; filename="{remote}"\r\nContent-Type: application/octet-stream'
                data = p.read_bytes()
            else:
                head = f'Content-Disposition: form-data; name="error"; filename="{remote}"\r\nContent-Type: application/json'
                data = json.dumps({"message": "file not found", "statusCode": 404}).encode()
            out += f"--{boundary}\r\n{head}\r\n\r\n".encode() + data + b"\r\n"
        out += f"--{boundary}--\r\n".encode()
        return bytes(out), f"multipart/form-data; boundary={boundary}"


class _Http(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
