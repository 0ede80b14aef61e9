"""The sandbox lifecycle contract (base.SandboxProvider) on this host, over the local provider.

A "sandbox" is a private directory `<root>/<name>/` holding `fs/` (what the remote paths map to:
`/workspace` -> `fs/workspace`) and `tags.json`. exec runs through `LocalProvider.run` with `fs/`
as the only writable path, so the local provider's guarantees (bubblewrap where available, a
built environment, walltime from outside) hold. There is no image: `environment_fidelity` stays
"host" and `dockerfile`/`image`, cpu, memory and GPU fields are recorded, not enforced.
"""
from __future__ import annotations

import io
import json
import shutil
import tarfile
import time
import uuid
from pathlib import Path
from typing import Callable

from runstate.atomic import make_private_dir, write_atomic
from sweep.tree import extract_tar
from sweep.providers.base import (ExecSpec, SandboxError, SandboxExecResult, SandboxHandle, SandboxInfo,
                                  SandboxSpec, TerminateOutcome, check_tags)


class LocalSandboxes:
    name = "local"
    environment_fidelity = "host"
    network_allow_families: tuple[int, ...] = ()    # every exec runs with network "none": no allow list

    def __init__(self, root: str | Path, isolation: str = "bwrap") -> None:
        from sweep.providers.local import LocalProvider
        self.root = make_private_dir(Path(root))
        self.local = LocalProvider(isolation=isolation)
        self.receipt_options = {"root": str(self.root), "isolation": isolation}

    def _dir(self, sandbox_id: str) -> Path:
        d = self.root / sandbox_id
        if not (d / "tags.json").is_file():
            raise SandboxError(f"local sandbox {sandbox_id} does not exist", error_class="failure")
        return d

    def _map(self, d: Path, remote: str | None) -> Path:
        fs = (d / "fs").resolve()
        p = (fs / (remote or "/").lstrip("/")).resolve()
        if p != fs and fs not in p.parents:
            raise SandboxError(f"path {remote!r} escapes the sandbox", error_class="failure")
        return p

    def create(self, spec: SandboxSpec) -> SandboxHandle:
        check_tags(spec.tags)
        d = self.root / spec.name
        if (d / "tags.json").is_file():          # idempotent on the name, for the same instance only
            tags = json.loads((d / "tags.json").read_text())
            if tags.get("sweep.instance") != spec.tags["sweep.instance"]:
                raise SandboxError(f"the name {spec.name} is taken by another sandbox", error_class="failure")
        else:
            make_private_dir(d)
            make_private_dir(d / "fs")
            write_atomic(d / "tags.json", json.dumps(spec.tags, sort_keys=True).encode())
        return SandboxHandle(provider=self.name, sandbox_id=spec.name, name=spec.name, tags=dict(spec.tags))

    def upload_archive(self, handle: SandboxHandle, local_dir: Path, remote_dir: str) -> None:
        dest = self._map(self._dir(handle.sandbox_id), remote_dir)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(str(local_dir), arcname=".")
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(buf.getvalue()), mode="r:gz") as tar:
            tar.extractall(dest, filter="data")

    def exec(self, handle: SandboxHandle, argv: list[str], *, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: bytes | None = None, timeout_s: float,
             on_output: Callable[[str], None] | None = None,
             idle_timeout_s: float | None = None) -> SandboxExecResult:
        d = self._dir(handle.sandbox_id)
        wd = self._map(d, cwd)
        wd.mkdir(parents=True, exist_ok=True)
        stdin_path = None
        if stdin is not None:
            stdin_path = d / f"stdin-{uuid.uuid4().hex[:12]}"
            write_atomic(stdin_path, stdin)
        streamed = []

        def stream(chunk: bytes) -> None:       # each chunk of stdout as the process writes it
            streamed.append(True)
            if on_output is not None:
                on_output(chunk.decode("utf-8", "replace"))

        # wd listed as writable too: the local provider binds its cwd read-only over an enclosing
        # writable path otherwise
        try:
            start = time.monotonic()
            r = self.local.run(ExecSpec(argv=list(argv), cwd=wd, timeout_s=timeout_s, write_paths=(d / "fs", wd),
                                        env=dict(env or {}), stdin_path=stdin_path, idle_timeout_s=idle_timeout_s,
                                        stdout_watch=stream))
        finally:
            if stdin_path is not None:
                stdin_path.unlink(missing_ok=True)
        if r.launch_error:
            raise SandboxError(f"local exec could not start: {r.launch_error}", error_class="failure")
        if on_output is not None and r.stdout_tail and not streamed:
            on_output(r.stdout_tail)
        stalled = r.stopped == "stalled"
        return SandboxExecResult(rc=None if r.timed_out or stalled else r.rc, timed_out=r.timed_out,
                                 duration_s=time.monotonic() - start, stdout_tail=r.stdout_tail,
                                 stderr_tail=r.stderr_tail, stopped="stalled" if stalled else None)

    def download_archive(self, handle: SandboxHandle, remote_dir: str, local_dir: Path, *,
                         only: list[str] | None = None, max_bytes: int | None = None) -> None:
        src = self._map(self._dir(handle.sandbox_id), remote_dir)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(str(src), arcname=".")
        buf.seek(0)
        extract_tar(buf, local_dir, only=only, max_bytes=max_bytes)

    def terminate(self, handle: SandboxHandle) -> str:
        d = self.root / handle.sandbox_id
        if not d.exists():
            return TerminateOutcome.ALREADY_GONE
        shutil.rmtree(d)
        return TerminateOutcome.CONFIRMED

    def list_by_tags(self, tags: dict[str, str]) -> list[SandboxInfo]:
        out = []
        for d in sorted(self.root.iterdir()):
            try:
                t = json.loads((d / "tags.json").read_text())
            except (OSError, ValueError):
                continue
            if all(t.get(k) == v for k, v in tags.items()):
                out.append(SandboxInfo(sandbox_id=d.name, name=d.name, tags=t, state="started"))
        return out
