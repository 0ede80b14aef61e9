"""The Daytona provider: remote sandboxes through the `daytona` SDK (`pip install 'sweep[daytona]'`).

The SDK is imported when this module is, and this module only when a plan names `daytona` (the
lazy registry in sweep/providers/__init__.py), so `sweep status` never imports it.

- One explicit client per provider instance, built from an API key read from a file or a named
  environment variable at construction (never the SDK's process-wide environment defaults).
- Every sandbox has a deterministic name and the sweep tags as Daytona labels; create is
  idempotent on the name (a 409 returns the existing sandbox).
- Provider-side caps are always set: `auto_stop_interval` (idle minutes), `auto_delete_interval=0`
  (deleted as soon as it stops) and `ttl_minutes` (wall-clock cap from creation), so a lost
  controller cannot leak a sandbox for longer than its walltime.
- Network: `network_block_all` for "none"; for "api" `network_allow_list`, the endpoints' IPv4
  addresses as /32 CIDRs resolved at create time (sweep/providers/remote.py resolve_allow_list).
- Errors become SandboxError with an error class: 429 or "too many requests"/"capacity"/"limit
  exceeded" -> throttle; 5xx or no HTTP answer at all (connection refused) -> outage; 401/403 ->
  config; anything else (400, 404, 409, 422, build failure, create timeout) -> failure.
- exec streams: it runs the command in a session of its own (`process.create_session`,
  `execute_session_command(run_async=True)`) and polls the command's logs and exit code, so
  `on_output` gets output as it arrives; the walltime and the stall detector (no new output for
  `idle_timeout_s`) are enforced here, from outside, by deleting the session (which ends the
  command). stdin and env are uploaded as files (env never appears in the command line).
  Archive packing uses the one-shot `process.exec`.
"""
from __future__ import annotations

import hashlib
import io
import math
import os
import shlex
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import daytona
from daytona import (CreateSandboxFromImageParams, CreateSandboxFromSnapshotParams, CreateSnapshotParams, Daytona,
                     DaytonaConfig, DaytonaError, Image, ListSandboxesQuery, Resources, SessionExecuteRequest)

from sweep.providers.base import (GpuRequest, SandboxError, SandboxExecResult, SandboxHandle, SandboxInfo,
                                  SandboxSpec, TerminateOutcome, allowed_cidrs, check_tags, network_policy)
from sweep.providers.image import image_spec
from sweep.providers.remote import ClassifiedCalls, key_location, read_key
from sweep.tree import extract_tar

TAIL_BYTES = 16_384
GONE_STATES = {"destroyed", "destroying"}
THROTTLE_TEXT = ("too many requests", "rate limit", "limit exceeded", "capacity")
POLL_S = (0.1, 1.0)          # the log poll starts fast and backs off to this while nothing changes
UPLOAD_NAME = ".sweep-upload.tar.gz"
DOWNLOAD_NAME = ".sweep-download.tar.gz"


def classify(exc: BaseException) -> str:
    """outage | throttle | config | failure for an exception the SDK raised."""
    status = getattr(exc, "status_code", None)
    text = str(exc).lower()
    if isinstance(exc, getattr(daytona, "DaytonaRateLimitError", ())) or status == 429 \
            or any(t in text for t in THROTTLE_TEXT):
        return "throttle"
    if isinstance(exc, (getattr(daytona, "DaytonaAuthenticationError", ()),
                        getattr(daytona, "DaytonaForbiddenError", ()))) or status in (401, 403):
        return "config"
    if status in (500, 502, 503, 504) or isinstance(exc, (getattr(daytona, "DaytonaServiceUnavailableError", ()),
                                                          getattr(daytona, "DaytonaBadGatewayError", ()),
                                                          getattr(daytona, "DaytonaInternalServerError", ()),
                                                          getattr(daytona, "DaytonaConnectionError", ()))):
        return "outage"
    if status is None and any(t in text for t in ("connection refused", "newconnectionerror", "max retries exceeded",
                                                  "name or service not known", "connecterror", "connection reset")):
        return "outage"
    return "failure"


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None)


class DaytonaProvider(ClassifiedCalls):
    name = "daytona"
    sdk_error = DaytonaError
    environment_fidelity = "container"
    isolation = "container"
    network_allow_families: tuple[int, ...] = (4,)   # `network_allow_list`: comma-separated IPv4 CIDRs

    def __init__(self, *, api_url: str | None = None, api_key_file: str | os.PathLike[str] | None = None,
                 api_key_env: str = "DAYTONA_API_KEY", target: str = "us",
                 create_timeout_s: float = 600) -> None:
        key = read_key(api_key_file, api_key_env, "Daytona API key")
        self.api_url = api_url or os.environ.get("DAYTONA_API_URL") or "https://app.daytona.io/api"
        # what a receipt records so `sweep reconcile` can reach the same account: no secret, only
        # where the key is (a file path or a variable name)
        self.receipt_options: dict[str, str] = {"api_url": self.api_url, "target": target,
                                                **key_location("api_key", api_key_file, api_key_env)}
        self.create_timeout_s = create_timeout_s
        try:
            self.client = Daytona(DaytonaConfig(api_key=key, api_url=self.api_url, target=target))
        except DaytonaError as exc:
            raise self._error("cannot build the Daytona client", exc) from None

    # --- errors --------------------------------------------------------------------------------

    def classify(self, exc: BaseException) -> str:
        return classify(exc)

    def evidence(self, exc: BaseException) -> str:
        return f"{type(exc).__name__} status={_status(exc)}: {str(exc)[:300]}"

    # --- lifecycle -----------------------------------------------------------------------------

    def _snapshot(self, spec: SandboxSpec, dockerfile: Path, resources: Any) -> str:
        """The snapshot built from the task's Dockerfile, named by its content hash: reused when it
        exists (a second run with the same environment builds nothing), built once otherwise."""
        img = image_spec(dockerfile.parent, agent_cli=spec.agent_cli)
        # a Daytona snapshot carries the sandbox's resources too: one snapshot per image and size
        size = f"c{resources.cpu}m{resources.memory}d{resources.disk or 0}g{resources.gpu or 0}{spec.gpu and spec.gpu.type or ''}"
        name = f"{img.name}-{hashlib.sha256(size.encode()).hexdigest()[:8]}"
        try:
            found = self.client.snapshot.get(name)
            state = str(getattr(found.state, "value", found.state) or "").lower()
            if state == "active":
                return name
            if state in ("error", "build_failed"):
                raise SandboxError(f"daytona: the image {name} failed to build earlier "
                                   f"({getattr(found, 'error_reason', '') or state})", error_class="failure")
        except DaytonaError as exc:
            if not (_status(exc) == 404 or isinstance(exc, getattr(daytona, "DaytonaNotFoundError", ()))):
                raise self._error("look up the image", exc) from None
        image = Image().dockerfile_commands(img.dockerfile.splitlines(), context_dir=str(img.context_dir),
                                            strict_context=True)
        try:
            self.client.snapshot.create(CreateSnapshotParams(name=name, image=image, resources=resources),
                                        timeout=self.create_timeout_s)
        except DaytonaError as exc:
            if _status(exc) != 409:          # built meanwhile by another controller: use it
                raise self._error(f"building the image {name} failed", exc) from None
        return name

    def create(self, spec: SandboxSpec) -> SandboxHandle:
        check_tags(spec.tags)
        resources = Resources(cpu=max(1, math.ceil(spec.cpu)), memory=max(1, math.ceil(spec.memory_mb / 1024)),
                              disk=spec.disk_gb, gpu=spec.gpu.count if spec.gpu else None,
                              gpu_type=_gpu_type(spec.gpu))
        common: dict[str, Any] = dict(
            name=spec.name, labels=dict(spec.tags), env_vars=dict(spec.env), network_block_all=spec.network_block_all,
            network_allow_list=",".join(allowed_cidrs(spec)) or None,
            auto_stop_interval=max(1, math.ceil((spec.idle_timeout_s or spec.timeout_s) / 60)),
            auto_delete_interval=0, ttl_minutes=max(1, math.ceil(spec.timeout_s / 60)))
        params: Any
        if spec.dockerfile is not None:
            image = self._snapshot(spec, spec.dockerfile, resources)
            params = CreateSandboxFromSnapshotParams(snapshot=image, **common)
        else:
            image = spec.image or "python:3.12-slim"
            params = CreateSandboxFromImageParams(image=image, resources=resources, **common)
        try:
            sb = self.client.create(params, timeout=self.create_timeout_s)
        except DaytonaError as exc:
            if _status(exc) == 409 or isinstance(exc, getattr(daytona, "DaytonaConflictError", ())):
                sb = self._call("get the existing sandbox", self.client.get, spec.name)   # idempotent on the name
                if dict(sb.labels or {}).get("sweep.instance") != spec.tags["sweep.instance"]:
                    raise SandboxError(f"daytona: the name {spec.name} is taken by another sandbox",
                                       error_class="failure") from None
            else:
                leaked = getattr(exc, "sandbox_id", None)
                if leaked:           # created server-side, then the wait timed out: delete what exists
                    try:
                        self.client.delete(self.client.get(leaked), wait=False)
                    except DaytonaError:
                        pass         # reconcile finds it by its tags
                raise self._error("create failed", exc) from None
        return SandboxHandle(provider=self.name, sandbox_id=sb.id, name=sb.name, tags=dict(spec.tags), image=image,
                             network=network_policy(spec),
                             network_allow=allowed_cidrs(spec))

    def _sandbox(self, handle: SandboxHandle) -> Any:
        return self._call("find the sandbox", self.client.get, handle.sandbox_id)

    def exec(self, handle: SandboxHandle, argv: list[str], *, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: bytes | None = None, timeout_s: float,
             on_output: Callable[[str], None] | None = None,
             idle_timeout_s: float | None = None) -> SandboxExecResult:
        sb = self._sandbox(handle)
        tag = uuid.uuid4().hex[:12]
        here = f"{cwd.rstrip('/')}/" if cwd else ""     # the files go where the command starts
        if cwd:                              # like the other providers: a missing cwd is made
            self._call("make the working directory", sb.fs.create_folder, cwd, "755")
        command = shlex.join(argv)           # quoted: argv text never becomes shell syntax
        prelude = ""                         # each file is read, then removed, before the command starts
        if env:
            name = f".sweep-env-{tag}"
            lines = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if k.isidentifier())
            self._call("upload the environment", sb.fs.upload_file, lines.encode(), here + name)
            prelude += f". ./{name}; rm -f {name}; "
        if stdin is not None:
            name = f".sweep-stdin-{tag}"
            self._call("upload stdin", sb.fs.upload_file, stdin, here + name)
            prelude += f"exec 3< {name}; rm -f {name}; "
            command = f"{command} <&3 3<&-"
        script = (f"cd {shlex.quote(cwd)} || exit 125; " if cwd else "") + f"{prelude}{command}"
        session = f"sweep-{tag}"
        start = time.monotonic()
        self._call("open an exec session", sb.process.create_session, session)
        try:
            resp = self._call("exec failed", sb.process.execute_session_command, session,
                              SessionExecuteRequest(command=f"bash -c {shlex.quote(script)}", run_async=True))
            return self._follow(sb, session, resp.cmd_id, start, timeout_s, idle_timeout_s, on_output)
        finally:
            try:                             # ends the command if it still runs (walltime, stall)
                sb.process.delete_session(session)
            except DaytonaError:
                pass                         # the sandbox's own caps (auto-stop, TTL) still hold

    def _follow(self, sb: Any, session: str, cmd_id: str, start: float, timeout_s: float,
                idle_timeout_s: float | None, on_output: Callable[[str], None] | None) -> SandboxExecResult:
        """Poll the command until it exits, its walltime passes, or it stalls; stream new output."""
        seen = ""
        last = start
        wait = POLL_S[0]
        stopped = None
        timed_out = False
        rc = None
        while True:
            cmd = self._call("read the command's state", sb.process.get_session_command, session, cmd_id)
            logs = self._call("read the command's output", sb.process.get_session_command_logs, session, cmd_id)
            out = logs.output or ""
            now = time.monotonic()
            if len(out) > len(seen):
                if on_output is not None:
                    on_output(out[len(seen):])
                seen, last, wait = out, now, POLL_S[0]
            if cmd.exit_code is not None:
                rc = cmd.exit_code
                break
            if now - start >= timeout_s:
                timed_out = True
                break
            if idle_timeout_s is not None and now - last >= idle_timeout_s:
                stopped = "stalled"
                break
            time.sleep(min(wait, max(0.01, timeout_s - (now - start))))
            wait = min(POLL_S[1], wait * 2)
        return SandboxExecResult(rc=rc, timed_out=timed_out, duration_s=time.monotonic() - start,
                                 stdout_tail=seen[-TAIL_BYTES:], stderr_tail="", stopped=stopped)

    def upload_archive(self, handle: SandboxHandle, local_dir: Path, remote_dir: str) -> None:
        """The whole directory as one tar.gz, unpacked in `remote_dir` (one upload, one exec)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(str(local_dir), arcname=".")
        sb = self._sandbox(handle)
        self._call("upload the workspace", sb.fs.upload_file, buf.getvalue(), f"{remote_dir.rstrip('/')}/{UPLOAD_NAME}")
        resp = self._call("unpack the workspace", sb.process.exec,
                          f"bash -c {shlex.quote(f'tar -xzf {UPLOAD_NAME} && rm -f {UPLOAD_NAME}')}",
                          cwd=remote_dir, timeout=600)
        if resp.exit_code != 0:
            raise SandboxError(f"daytona: unpacking the workspace failed: {(resp.result or '')[-500:]}",
                               error_class="failure")

    def download_archive(self, handle: SandboxHandle, remote_dir: str, local_dir: Path, *,
                         only: list[str] | None = None, max_bytes: int | None = None) -> None:
        """`remote_dir` packed as one tar.gz in the sandbox and unpacked under `local_dir` (safe
        extraction: no absolute paths, no `..`, no links out)."""
        sb = self._sandbox(handle)
        # the archive exists before tar reads ".": creating it mid-read changes the directory, and
        # GNU tar then exits 1 with "file changed as we read it"
        pack = f": > {DOWNLOAD_NAME} && tar --exclude=./{DOWNLOAD_NAME} -czf {DOWNLOAD_NAME} ."
        resp = self._call("pack the workspace", sb.process.exec, f"bash -c {shlex.quote(pack)}",
                          cwd=remote_dir, timeout=600)
        if resp.exit_code != 0:
            raise SandboxError(f"daytona: packing the workspace failed: {(resp.result or '')[-500:]}",
                               error_class="failure")
        data = self._call("download the workspace", sb.fs.download_file, f"{remote_dir.rstrip('/')}/{DOWNLOAD_NAME}")
        # member by member, only the write paths, within the bound (never tarfile's extraction)
        extract_tar(io.BytesIO(data), local_dir, only=only, max_bytes=max_bytes)
        try:
            sb.process.exec(f"rm -f {DOWNLOAD_NAME}", cwd=remote_dir, timeout=60)
        except DaytonaError:
            pass                # the sandbox is deleted with it

    def terminate(self, handle: SandboxHandle) -> str:
        return self.terminate_id(handle.sandbox_id)

    def terminate_id(self, sandbox_id: str) -> str:
        try:
            sb = self.client.get(sandbox_id)
        except DaytonaError as exc:
            if _status(exc) == 404 or isinstance(exc, getattr(daytona, "DaytonaNotFoundError", ())):
                return TerminateOutcome.ALREADY_GONE
            raise self._error("find the sandbox to terminate", exc) from None
        try:
            self.client.delete(sb, wait=False)
        except DaytonaError as exc:
            if _status(exc) == 404:
                return TerminateOutcome.ALREADY_GONE
            raise self._error("terminate failed", exc) from None
        try:                    # confirm: gone, or at least destroying
            again = self.client.get(sandbox_id)
        except DaytonaError as exc:
            if _status(exc) == 404 or isinstance(exc, getattr(daytona, "DaytonaNotFoundError", ())):
                return TerminateOutcome.CONFIRMED
            return TerminateOutcome.REQUESTED
        return TerminateOutcome.CONFIRMED if str(again.state).lower().endswith(("destroyed", "destroying")) \
            else TerminateOutcome.REQUESTED

    def list_by_tags(self, tags: dict[str, str]) -> list[SandboxInfo]:
        """Sandboxes not yet destroyed whose labels include all of `tags` (re-checked here: the
        server's filter is not trusted to be exact)."""
        found = self._call("list sandboxes", lambda: list(self.client.list(ListSandboxesQuery(labels=dict(tags)))))
        out = []
        for sb in found:
            labels = dict(sb.labels or {})
            state = str(getattr(sb.state, "value", sb.state) or "").lower()
            if state in GONE_STATES or any(labels.get(k) != v for k, v in tags.items()):
                continue
            out.append(SandboxInfo(sandbox_id=sb.id, name=sb.name, tags=labels, state=state))
        return out


def _gpu_type(gpu: GpuRequest | None) -> Any:
    if gpu is None or gpu.type is None:
        return None
    known = {t.value: t for t in daytona.GpuType if not t.name.startswith("UNKNOWN")}
    if gpu.type not in known:      # the SDK maps unknown names to a catch-all instead of refusing
        raise SandboxError(f"daytona has no GPU type {gpu.type!r} (known: {', '.join(sorted(known))})",
                           error_class="config", field="gpu")
    return known[gpu.type]


__all__ = ["DaytonaProvider", "classify"]
