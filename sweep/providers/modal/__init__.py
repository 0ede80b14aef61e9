"""The Modal provider: remote sandboxes through the `modal` SDK (`pip install 'sweep[modal]'`).

Imported only when a plan or `sweep reconcile` names `modal` (the lazy registry).

- One explicit client per provider instance (`modal.Client.from_credentials` with a token read
  from files or named environment variables), never the process-wide `Client.from_env`.
- Sandboxes live in one Modal app per campaign (`sweep-<campaign>`), are created with a
  keep-alive entrypoint and the sweep tags at create time, and always carry Modal's `timeout`
  (hard lifetime) and `idle_timeout`. `MODAL_MAX_THROTTLE_WAIT` is set (if unset) so throttling
  surfaces as ResourceExhaustedError instead of retrying forever.
- Network: `block_network` for "none"; for "api" `outbound_cidr_allowlist`, the endpoints'
  addresses as /32 or /128 CIDRs resolved at create time (remote.resolve_allow_list).
- Create is idempotent on the name: AlreadyExistsError -> `Sandbox.from_name`, accepted only when
  its instance tag is ours.
- Errors: ResourceExhaustedError -> throttle; ConnectionError, ServiceError, InternalError ->
  outage; AuthError, PermissionDeniedError -> config; everything else -> failure.
- Exit 137 after OUR terminate is reported as terminated, not as an out-of-memory kill: ids we
  asked to terminate are remembered before the call (`terminated_by_us`).
"""
from __future__ import annotations

import io
import math
import os
import queue
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import modal
import modal.exception as mexc

from sweep.providers.base import (SandboxError, SandboxExecResult, SandboxHandle, SandboxInfo, SandboxSpec,
                                  TerminateOutcome, allowed_cidrs, check_tags, network_policy,
                                  sandbox_name)
from sweep.providers.image import image_spec
from sweep.providers.remote import ClassifiedCalls, key_location, read_key
from sweep.tree import extract_tar

TAIL_CHARS = 16_384
# stop the process whose pid is in the file "$0" and all its descendants: stop each first (it
# cannot fork any more), then kill the whole tree
STOP_TREE = ('s() { local c; kill -STOP "$1" 2>/dev/null; for c in $(cat /proc/$1/task/*/children 2>/dev/null); '
             'do s "$c"; done; kill -KILL "$1" 2>/dev/null; }; s "$(cat "$0")"; rm -f "$0"')
_ENV_LOCK = threading.Lock()
UPLOAD_NAME = ".sweep-upload.tar.gz"
DOWNLOAD_NAME = ".sweep-download.tar.gz"


def classify(exc: BaseException) -> str:
    if isinstance(exc, mexc.ResourceExhaustedError):
        return "throttle"
    if isinstance(exc, (mexc.AuthError, mexc.PermissionDeniedError)):
        return "config"
    if isinstance(exc, (mexc.ConnectionError, mexc.ServiceError, mexc.InternalError)):
        return "outage"
    return "failure"


class ModalProvider(ClassifiedCalls):
    name = "modal"
    sdk_error = mexc.Error
    environment_fidelity = "container"
    isolation = "container"
    network_allow_families: tuple[int, ...] = (4, 6)  # `outbound_cidr_allowlist`

    def __init__(self, *, app_name: str = "sweep", server_url: str | None = None,
                 token_id_file: str | None = None, token_secret_file: str | None = None,
                 token_id_env: str = "MODAL_TOKEN_ID", token_secret_env: str = "MODAL_TOKEN_SECRET",  # noqa: S107 (names, not values)
                 max_throttle_wait_s: int = 300) -> None:
        token_id = read_key(token_id_file, token_id_env, "Modal token id")
        token_secret = read_key(token_secret_file, token_secret_env, "Modal token secret")
        os.environ.setdefault("MODAL_MAX_THROTTLE_WAIT", str(max_throttle_wait_s))
        self.app_name = app_name
        self.server_url = server_url
        self.receipt_options: dict[str, Any] = {"app_name": app_name}
        if server_url:
            self.receipt_options["server_url"] = server_url
        self.receipt_options.update(key_location("token_id", token_id_file, token_id_env))
        self.receipt_options.update(key_location("token_secret", token_secret_file, token_secret_env))
        self.terminated_by_us: set[str] = set()
        try:
            with _ENV_LOCK:     # the SDK reads the server URL from its config when the client is made
                old = os.environ.get("MODAL_SERVER_URL")
                if server_url:
                    os.environ["MODAL_SERVER_URL"] = server_url
                try:
                    self.client = modal.Client.from_credentials(token_id, token_secret)
                finally:
                    if server_url:
                        if old is None:
                            os.environ.pop("MODAL_SERVER_URL", None)
                        else:
                            os.environ["MODAL_SERVER_URL"] = old
        except mexc.Error as exc:
            raise self._error("cannot connect a Modal client", exc) from None
        self._app: Any = None

    def classify(self, exc: BaseException) -> str:
        return classify(exc)

    def app(self) -> Any:
        if self._app is None:
            self._app = self._call("look up the app", modal.App.lookup, self.app_name, create_if_missing=True,
                                   client=self.client)
        return self._app

    def create(self, spec: SandboxSpec) -> SandboxHandle:
        check_tags(spec.tags)
        with tempfile.TemporaryDirectory(prefix="sweep-modal-image-") as tmp:
            return self._create(spec, Path(tmp))

    def _create(self, spec: SandboxSpec, tmp: Path) -> SandboxHandle:
        identity = spec.image or "python:3.12-slim"
        if spec.dockerfile is not None:
            # the image spec's Dockerfile (sweep/providers/image.py: the uploaded repository's COPY
            # left out, the agent CLI layer added), built with environment/ as its context; Modal
            # caches the layers by content, so the same identity builds nothing new
            img = image_spec(Path(spec.dockerfile).parent, agent_cli=spec.agent_cli)
            (tmp / "Dockerfile").write_text(img.dockerfile, encoding="utf-8")
            image = modal.Image.from_dockerfile(str(tmp / "Dockerfile"), context_dir=str(img.context_dir))
            identity = img.identity
        else:
            image = modal.Image.from_registry(identity)
        gpu = None
        if spec.gpu is not None:
            gpu = f"{spec.gpu.type or 'any'}:{spec.gpu.count}"
        try:
            sb = modal.Sandbox.create(
                "sleep", "infinity", app=self.app(), image=image, client=self.client, name=spec.name,
                tags=dict(spec.tags), timeout=int(spec.timeout_s),
                idle_timeout=int(spec.idle_timeout_s) if spec.idle_timeout_s else None,
                cpu=float(spec.cpu), memory=int(spec.memory_mb), gpu=gpu, env=dict(spec.env) or None,
                block_network=spec.network_block_all,
                outbound_cidr_allowlist=list(allowed_cidrs(spec)) or None)
        except mexc.AlreadyExistsError:
            # a retried create after a lost answer: the name is ours only if a sandbox with our
            # instance tag and this name is running
            mine = [i for i in self.list_by_tags({"sweep.instance": spec.tags["sweep.instance"]})]
            if len(mine) != 1:
                raise SandboxError(f"modal: the name {spec.name} is taken by another sandbox",
                                   error_class="failure") from None
            return SandboxHandle(provider=self.name, sandbox_id=mine[0].sandbox_id, name=spec.name, image=identity,
                                 tags=dict(spec.tags), network=network_policy(spec),
                                 network_allow=allowed_cidrs(spec))
        except mexc.Error as exc:
            raise self._error("create failed", exc) from None
        return SandboxHandle(provider=self.name, sandbox_id=sb.object_id, name=spec.name, tags=dict(spec.tags),
                             image=identity, network=network_policy(spec), network_allow=allowed_cidrs(spec))

    def _sandbox(self, sandbox_id: str) -> Any:
        return self._call("find the sandbox", modal.Sandbox.from_id, sandbox_id, client=self.client)

    def exec(self, handle: SandboxHandle, argv: list[str], *, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: bytes | None = None, timeout_s: float,
             on_output: Callable[[str], None] | None = None,
             idle_timeout_s: float | None = None) -> SandboxExecResult:
        """Streams stdout to on_output. With `idle_timeout_s`, stdout is read by a thread and a
        command silent for that long is stopped: the command runs under a wrapper that records its
        pid, and a second exec stops it and every descendant (SIGSTOP, then SIGKILL, through
        /proc/<pid>/task/*/children)."""
        sb = self._sandbox(handle.sandbox_id)
        start = time.monotonic()
        pidfile = f"/tmp/.sweep-exec-{uuid.uuid4().hex[:12]}.pid"  # noqa: S108 - inside the remote sandbox
        if idle_timeout_s is not None:
            argv = ["bash", "-c", 'echo $$ > "$0"; "$@"; rc=$?; rm -f "$0"; exit $rc', pidfile, *argv]
        stopped = None
        try:
            p = sb.exec(*argv, workdir=cwd, env=env or None, timeout=max(1, math.ceil(timeout_s)), text=True)
            if stdin is not None:
                p.stdin.write(stdin)
                p.stdin.write_eof()
                p.stdin.drain()
            out: list[str] = []
            if idle_timeout_s is None:
                for chunk in p.stdout:        # streamed as it arrives
                    out.append(chunk)
                    if on_output is not None:
                        on_output(chunk)
            else:
                stopped = self._read_watching(sb, p, pidfile, idle_timeout_s, out, on_output)
            err = "" if stopped else p.stderr.read()
            rc = p.wait()
        except mexc.Error as exc:
            raise self._error("exec failed", exc) from None
        stdout = "".join(out)
        if stopped:
            return SandboxExecResult(rc=None, timed_out=False, duration_s=time.monotonic() - start,
                                     stdout_tail=stdout[-TAIL_CHARS:], stderr_tail="", stopped=stopped)
        timed_out = rc == -1                  # the SDK reports its exec deadline as -1, not an exception
        if rc == 137 and handle.sandbox_id in self.terminated_by_us:
            err = (err or "") + "\n[sweep] exit 137 after our own terminate: not an out-of-memory kill"
        return SandboxExecResult(rc=None if timed_out else rc, timed_out=timed_out,
                                 duration_s=time.monotonic() - start, stdout_tail=stdout[-TAIL_CHARS:],
                                 stderr_tail=(err or "")[-TAIL_CHARS:])

    def _read_watching(self, sb: Any, p: Any, pidfile: str, idle_timeout_s: float, out: list[str],
                       on_output: Callable[[str], None] | None) -> str | None:
        """Read stdout in a thread; "stalled" (after stopping the command) when nothing came for
        `idle_timeout_s`, None when the stream ended."""
        chunks: queue.Queue[str | None | BaseException] = queue.Queue()

        def pump() -> None:
            try:
                for chunk in p.stdout:
                    chunks.put(chunk)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                chunks.put(exc)
            chunks.put(None)

        reader = threading.Thread(target=pump, daemon=True, name="sweep-modal-stdout")
        reader.start()
        while True:
            try:
                item = chunks.get(timeout=idle_timeout_s)
            except queue.Empty:
                break
            if item is None:
                return None
            if isinstance(item, BaseException):
                raise item
            out.append(item)
            if on_output is not None:
                on_output(item)
        kill = self._call("stop a stalled command", sb.exec, "bash", "-c", STOP_TREE, pidfile, timeout=60, text=True)
        kill.wait()
        reader.join(timeout=30)
        return "stalled"

    def upload_archive(self, handle: SandboxHandle, local_dir: Path, remote_dir: str) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(str(local_dir), arcname=".")
        sb = self._sandbox(handle.sandbox_id)
        remote = f"{remote_dir.rstrip('/')}/{UPLOAD_NAME}"
        mk = self.exec(handle, ["mkdir", "-p", remote_dir], timeout_s=60)
        if mk.rc != 0:
            raise SandboxError(f"modal: cannot make {remote_dir}: {mk.stderr_tail[-300:]}", error_class="failure")
        self._call("upload the workspace", sb.filesystem.write_bytes, buf.getvalue(), remote)
        r = self.exec(handle, ["bash", "-c", f"tar -xzf {UPLOAD_NAME} && rm -f {UPLOAD_NAME}"], cwd=remote_dir,
                      timeout_s=600)
        if r.rc != 0:
            raise SandboxError(f"modal: unpacking the workspace failed: {r.stderr_tail[-500:]}", error_class="failure")

    def download_archive(self, handle: SandboxHandle, remote_dir: str, local_dir: Path, *,
                         only: list[str] | None = None, max_bytes: int | None = None) -> None:
        r = self.exec(handle, ["bash", "-c", f": > {DOWNLOAD_NAME} && tar --exclude=./{DOWNLOAD_NAME} -czf {DOWNLOAD_NAME} ."],
                      cwd=remote_dir, timeout_s=600)
        if r.rc != 0:
            raise SandboxError(f"modal: packing the workspace failed: {r.stderr_tail[-500:]}", error_class="failure")
        sb = self._sandbox(handle.sandbox_id)
        data = self._call("download the workspace", sb.filesystem.read_bytes,
                          f"{remote_dir.rstrip('/')}/{DOWNLOAD_NAME}")
        # member by member, only the write paths, within the bound (never tarfile's extraction)
        extract_tar(io.BytesIO(data), local_dir, only=only, max_bytes=max_bytes)
        self.exec(handle, ["rm", "-f", DOWNLOAD_NAME], cwd=remote_dir, timeout_s=60)

    def terminate(self, handle: SandboxHandle) -> str:
        self.terminated_by_us.add(handle.sandbox_id)     # before the call: a 137 from here on is ours
        try:
            sb = modal.Sandbox.from_id(handle.sandbox_id, client=self.client)
        except mexc.NotFoundError:
            return TerminateOutcome.ALREADY_GONE
        except mexc.Error as exc:
            raise self._error("find the sandbox to terminate", exc) from None
        try:
            sb.terminate()
        except mexc.NotFoundError:
            return TerminateOutcome.ALREADY_GONE
        except mexc.Error as exc:
            raise self._error("terminate failed", exc) from None
        try:   # confirm: Modal lists running sandboxes only
            still = [i for i in self.list_by_tags({"sweep.instance": handle.tags["sweep.instance"]})
                     if i.sandbox_id == handle.sandbox_id]
        except SandboxError:
            return TerminateOutcome.REQUESTED
        return TerminateOutcome.REQUESTED if still else TerminateOutcome.CONFIRMED

    def list_by_tags(self, tags: dict[str, str]) -> list[SandboxInfo]:
        """Running sandboxes of this provider's app with at least these tags (re-checked here)."""
        app = self.app()
        found = self._call("list sandboxes", lambda: list(modal.Sandbox.list(app_id=app.app_id, tags=dict(tags),
                                                                               client=self.client)))
        out = []
        for sb in found:
            t = self._call("read sandbox tags", sb.get_tags)
            if any(t.get(k) != v for k, v in tags.items()):
                continue
            out.append(SandboxInfo(sandbox_id=sb.object_id, name=sandbox_name(t) if _complete(t) else sb.object_id,
                                   tags=dict(t), state="running"))
        return out


def _complete(tags: dict[str, str]) -> bool:
    try:
        check_tags(tags)
    except ValueError:
        return False
    return True


__all__ = ["ModalProvider", "classify"]
