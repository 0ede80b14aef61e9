"""Run one command (the `Provider` contract) in a remote sandbox built from the task's image.

`ContainerRunner.run(ExecSpec)` is what the gates' and solver's trials (and a solver session)
call when the campaign's provider is remote. Each call is one sandbox, as each local run is one
bubblewrap sandbox:

1. create it from the task's environment/Dockerfile (sweep/providers/image.py: one image per
   content hash, reused), with a receipt written before the create (sweep/providers/receipts.py);
2. upload what the command may see as ONE archive: the spec's cwd, write paths and read paths
   under the run directory, at the same place relative to `/sweep/run` in the sandbox (every
   host path of the run directory in argv, env and cwd is rewritten the same way);
3. exec with the spec's walltime (and stdin, env, secrets read at launch);
4. download `/sweep/run` as one archive and put back ONLY the spec's write paths (and the output
   channel's file): whatever else the command changed stays in the sandbox;
5. terminate (receipt settled), whatever happened.

Network (the spec's mode): `none` blocks all network in the sandbox; `api` allows outbound
traffic only to the configured endpoints' addresses, resolved at create time and passed to the
provider as /32 or /128 CIDRs (a provider without an allow list refuses `api`); `host` is
unrestricted egress, the explicit opt-in. What was asked is on the handle and the ExecResult.

Host paths outside the run directory (the sweep installation, the Python prefix) are not shipped:
a runtime that needs them (oracle, nop) runs on the host. A provider-side problem is a
SandboxError with its error class (outage | throttle | config | failure), never a crash.
"""
from __future__ import annotations

import math
import os
import shutil
import time
import uuid
from pathlib import Path

from runstate.atomic import make_private_dir, write_atomic
from sweep.providers.base import (ExecResult, ExecSpec, FromEnv, OutputChannel, SandboxError, SandboxSpec,
                                  read_secret, sandbox_name)
from sweep.providers.receipts import create_with_receipt, new_tags, terminate_with_receipt
from sweep.tree import ExtractRefused

REMOTE_ROOT = "/sweep/run"
TAIL = 16_384


class ContainerRunner:
    isolation = "container"
    environment_fidelity = "container"

    def __init__(self, sandboxes, *, environment_dir: Path, run_dir: Path, campaign_id: str, run_id: str,
                 job_id: str, role: str, attempt: int, agent_cli: str | None = None, cpu: float = 1.0,
                 memory_mb: int = 2048, agent_key_in_sandbox: bool = False,
                 receipts_dir: Path | None = None) -> None:
        from sweep.providers.image import image_spec
        self.sandboxes = sandboxes
        self.name = sandboxes.name
        self.run_dir = Path(run_dir).resolve()
        # where the sandboxes' receipts go (a run directory, `runs/<run>`, so reconcile finds them):
        # the run directory itself, unless what is shipped lives elsewhere (an evaluation cell's)
        self.receipts_dir = Path(receipts_dir).resolve() if receipts_dir is not None else self.run_dir
        self.dockerfile = Path(environment_dir) / "Dockerfile"
        self.image = image_spec(environment_dir, agent_cli=agent_cli)     # a bad Dockerfile fails here
        self.ids = dict(campaign_id=campaign_id, run_id=run_id, job_id=job_id, role=role, attempt=attempt)
        self.agent_cli, self.cpu, self.memory_mb = agent_cli, cpu, memory_mb
        # the plan's [providers.<name>] agent_key_in_sandbox: an agent session that needs a model key
        # may hold it here (no relay reaches a remote sandbox); run_session refuses it otherwise
        self.agent_key_in_sandbox = agent_key_in_sandbox
        self.channels: dict[str, Path] = {}
        self.handles: list[str] = []                  # image of every sandbox this runner made
        self.network_policies: list[dict] = []        # the network policy each sandbox was created with

    # --- paths -------------------------------------------------------------------------------

    def _rel(self, p: Path) -> str | None:
        p = Path(p).resolve()
        if p == self.run_dir:
            return ""
        if self.run_dir in p.parents:
            return str(p.relative_to(self.run_dir))
        return None

    def remote(self, p: Path) -> str:
        rel = self._rel(p)
        if rel is None:
            return str(p)
        return f"{REMOTE_ROOT}/{rel}".rstrip("/")

    def _rewrite(self, text: str) -> str:
        return text.replace(str(self.run_dir), REMOTE_ROOT)

    # --- output channel: a file in the sandbox, copied back after the run ------------------------

    def open_output_channel(self, host_path: Path) -> OutputChannel:
        remote = f"{REMOTE_ROOT}/.sweep-io/output-{uuid.uuid4().hex[:8]}.json"
        self.channels[remote] = Path(host_path)
        return OutputChannel(host_path=Path(host_path), sandbox_path=remote, fd=-1)

    def close_output_channel(self, channel: OutputChannel) -> None:
        self.channels.pop(channel.sandbox_path, None)

    # --- network -----------------------------------------------------------------------------

    def _network(self, spec: ExecSpec) -> tuple[str, tuple[str, ...]]:
        """(mode, CIDRs) for the sandbox. `api` is narrowed to the endpoints' addresses resolved
        now; a provider whose allow list cannot express them refuses `api` (a `config`
        SandboxError), never widening it to full egress. `host` is the explicit opt-in."""
        from sweep.providers.local.network import network_mode
        from sweep.providers.remote import resolve_allow_list
        try:
            mode = network_mode(spec.network)
        except Exception as exc:
            raise SandboxError(f"{self.name}: {exc}", error_class="config", field="network") from None
        if mode != "api":
            return mode, ()
        families = tuple(getattr(self.sandboxes, "network_allow_families", ()) or ())
        if not families:
            raise SandboxError(f"provider {self.name} cannot restrict a sandbox's egress to given addresses, so "
                               "network 'api' is refused on it (use network 'none', or a provider with an "
                               "allow list: daytona, modal)", error_class="config", field="network")
        return mode, resolve_allow_list(spec.endpoints, provider=self.name, families=families)

    # --- one command -------------------------------------------------------------------------

    def run(self, spec: ExecSpec) -> ExecResult:
        started = time.monotonic()
        roots: list[Path] = []
        for p in sorted({Path(x).resolve() for x in (spec.cwd, *spec.write_paths, *spec.read_paths)}, key=str):
            if self._rel(p) is not None and p.exists() and not any(r == p or r in p.parents for r in roots):
                roots.append(p)
        stage = make_private_dir(self.run_dir / f".remote-stage-{uuid.uuid4().hex[:8]}")
        back = self.run_dir / f".remote-back-{uuid.uuid4().hex[:8]}"
        try:
            for root in roots:
                dest = stage / (self._rel(root) or ".")
                if root.is_dir():
                    shutil.copytree(root, dest, symlinks=True, dirs_exist_ok=True)
                else:
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(root, dest)
            make_private_dir(stage / ".sweep-io")
            return self._in_sandbox(spec, stage, back, started)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
            shutil.rmtree(back, ignore_errors=True)

    def _viewed(self, spec: ExecSpec, argv: list[str]) -> list[str]:
        """argv behind the spec's fixed view (ExecSpec.view: a trial's repository at /app, its tests,
        solution and logs at /tests, /solution, /logs, as a Harbor task container shows them): each
        view path a link to where its directory was shipped, made in the sandbox before the command
        runs. The paths are arguments, never shell text."""
        pairs: list[str] = []
        for host, target in spec.view:
            rel = self._rel(Path(host))
            if rel is not None and Path(host).exists() and target.startswith("/") and target.count("/") == 1:
                pairs += [f"{REMOTE_ROOT}/{rel}", target]
        if not pairs:
            return argv
        link = 'while [ "$1" != -- ]; do rm -rf -- "$2" && ln -s -- "$1" "$2" || exit 125; shift 2; done; shift; exec "$@"'
        return ["bash", "-c", link, "sweep-view", *pairs, "--", *argv]

    def _in_sandbox(self, spec: ExecSpec, stage: Path, back: Path, started: float) -> ExecResult:
        argv = self._viewed(spec, [self._rewrite(a) for a in spec.argv])
        env = {k: self._rewrite(v) for k, v in spec.env.items()}
        for name in spec.env_passthrough:
            if name in os.environ:
                env[name] = os.environ[name]
        for name, src in spec.secret_env.items():       # read at launch, sent with the exec only
            env[name] = read_secret(name, src if isinstance(src, FromEnv) else Path(src))
        stdin = Path(spec.stdin_path).read_bytes() if spec.stdin_path else None
        try:
            network, allow = self._network(spec)
        except SandboxError as exc:
            exc.nothing_ran = True       # refused before any sandbox existed: nothing to charge
            raise
        tags = new_tags(**self.ids)  # type: ignore[arg-type]
        sandbox = SandboxSpec(name=sandbox_name(tags), tags=tags, dockerfile=self.dockerfile, cpu=self.cpu,
                              memory_mb=self.memory_mb, timeout_s=int(math.ceil(spec.timeout_s)) + 900,
                              idle_timeout_s=int(math.ceil(spec.timeout_s)) + 900, agent_cli=self.agent_cli,
                              network_block_all=network == "none" or (network == "api" and not allow),
                              network_allow=allow)
        handle = create_with_receipt(self.sandboxes, sandbox, self.receipts_dir,
                                     getattr(self.sandboxes, "receipt_options", None))
        self.handles.append(handle.image)
        self.network_policies.append({"network": network, "endpoints": list(spec.endpoints),
                                      "network_allow": list(allow), "block_all": sandbox.network_block_all})
        try:
            self.sandboxes.upload_archive(handle, stage, REMOTE_ROOT)
            result = self.sandboxes.exec(handle, argv, cwd=self.remote(spec.cwd), env=env, stdin=stdin,
                                         timeout_s=spec.timeout_s)
            # only what the command may write comes back (its write paths, the output channels),
            # member by member, and no more than the workspace bound
            only = [r for r in (self._rel(Path(w)) for w in spec.write_paths) if r is not None]
            only += [remote[len(REMOTE_ROOT) + 1:] for remote in self.channels]
            refused: ExtractRefused | None = None
            try:
                self.sandboxes.download_archive(handle, REMOTE_ROOT, back, only=only,
                                                max_bytes=spec.limits.workspace_bytes)
            except ExtractRefused as exc:
                refused = exc
        finally:
            terminate_with_receipt(self.sandboxes, handle, self.receipts_dir)
        if refused is not None:
            # nothing of the sandbox is copied back: the write paths stay as they were
            return ExecResult(rc=None, timed_out=False, duration_s=time.monotonic() - started, stdout_tail="",
                              stderr_tail=f"sweep: {refused.message}"[-TAIL:], isolation="container", argv=argv,
                              env_names=sorted(env), network=network, stopped="unsafe_workspace" if not refused.limit
                              else None, limit_hit="workspace_bytes" if refused.limit else None)
        for w in spec.write_paths:
            rel = self._rel(Path(w))
            if rel is None:
                continue
            src = back / rel
            dest = Path(w)
            if dest.is_dir():
                shutil.rmtree(dest)
            elif dest.exists():
                dest.unlink()
            if src.is_dir():
                shutil.copytree(src, dest, symlinks=True)
            elif src.exists():
                shutil.copy2(src, dest)
            else:
                make_private_dir(dest)
        for remote, host in self.channels.items():
            got = back / remote[len(REMOTE_ROOT) + 1:]
            if got.is_file():
                write_atomic(host, got.read_bytes())
        from sweep.redact import Redactor
        redactor = Redactor([v for k, v in env.items() if k in spec.secret_env])
        out = redactor.scrub(result.stdout_tail)
        err = redactor.scrub(result.stderr_tail)
        for path, text in ((spec.stdout_path, out), (spec.stderr_path, err)):
            if path is not None:
                write_atomic(Path(path), text.encode())
        return ExecResult(rc=result.rc, timed_out=result.timed_out, duration_s=time.monotonic() - started,
                          stdout_tail=out[-TAIL:], stderr_tail=err[-TAIL:], isolation="container",
                          argv=argv, env_names=sorted(env), network=network,
                          endpoints=list(spec.endpoints) if network == "api" else [], network_allow=list(allow),
                          stopped=getattr(result, "stopped", None))


__all__ = ["ContainerRunner", "REMOTE_ROOT"]
