"""bubblewrap: the kernel-enforced half of the local provider's sandbox, built from an allowlist.

The sandbox does not start from the host's root. Its root is an empty tmpfs (made read-only once
everything is mounted) into which only these are bound:
- the system toolchain, read-only: /usr and the /bin, /sbin, /lib* entries (as the symlinks they are
  on a merged-/usr system, as read-only binds otherwise);
- a minimal /etc: name resolution, TLS certificates, the dynamic linker's cache, alternatives, time
  zone, the configuration Debian's JDKs keep there (/etc/java-*-openjdk); a generated passwd/group
  (root, the caller, nobody; no shadow, no credential file);
- the interpreter running sweep and sweep's own packages (the oracle and the network relay run in
  the sandbox), read-only;
- the session's declared read paths and the program it runs, read-only;
- the working directory read-only, and exactly the `write_paths` writable; each at its host path,
  or, under a directory of the spec's fixed view (ExecSpec.view), where the view puts it (a
  trial's repository at /app, its tests at /tests, its logs at /logs; a role session's workspace
  at /app, its session files at /session);
- a private /tmp (a size-bounded tmpfs, HOME inside it), its own /proc and a minimal /dev.
Everything else of the host (the campaign, other runs, the operator's home, /root, /run, /var,
/etc/slurm, munge, key files, host unix sockets) is simply absent: there is nothing to mask.

Measured on the development machine plus one finding of our own: run as root without a user
namespace, bwrap keeps every capability by default, and a sandboxed root process can then
`mount -o remount,bind,rw /` and write to the host through a read-only bind. `--cap-drop ALL` is
therefore part of every sandbox, not an option.
"""
from __future__ import annotations

import errno
import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from runstate.errors import ProviderError
from sweep.providers.base import ExecSpec
from sweep.execution import view_path

SANDBOX_HOME = "/tmp/sweep-home"     # on the sandbox's private tmpfs: writable, gone at exit
BASE_FLAGS = ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
              "--cap-drop", "ALL")
# Top-level system directories the toolchain lives in. Not /opt, /srv, /home, /var, /run, /root:
# an agent CLI installed elsewhere is declared as a read path.
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# The /etc entries a toolchain needs; nothing that holds a credential or names a host service.
ETC_ALLOWED = ("nsswitch.conf", "host.conf", "gai.conf", "protocols", "services", "networks",
               "ssl", "ca-certificates", "ca-certificates.conf", "pki", "crypto-policies",
               "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone",
               "mime.types", "magic", "os-release", "debian_version", "inputrc", "terminfo",
               "locale.alias", "bash.bashrc", "profile", "shells", "python3", "manpath.config")
# Toolchains that keep their configuration in /etc (Debian's JDKs: conf/security/java.security is
# a link to /etc/java-17-openjdk/security/): shown read-only; they hold no credential.
ETC_TOOLCHAIN_GLOBS = ("java-*-openjdk",)
SANDBOX_RELAY_DIR = "/run/sweep-net"  # where the network relay's sockets appear (see network.py)
DEFAULT_TMP_BYTES = 1 << 30           # the private /tmp's size when no bound is given

_probe: tuple[str | None, str] | None = None
PROBE_TRIES = 3          # a probe killed by a signal or stalled is tried again, this many times in all
_TRANSIENT_ERRNOS = (errno.EAGAIN, errno.ENOMEM, errno.EINTR)


class ProbeInconclusive(ProviderError):
    """Every try of the bwrap probe was killed by a signal, timed out or could not fork: nothing
    says this host cannot sandbox (a kill -9 that landed on the probe's child, a stalled machine),
    so it must not read as a configuration error (that parks the role and trips the breaker)."""


def probe_bwrap(refresh: bool = False) -> tuple[str | None, str]:
    """(path to a working bwrap or None, why not). Probed once per process with our real flags
    and the allowlist view (a bwrap too old for it fails here, not in the middle of a session).
    Only a verdict is kept: a probe that did not finish (killed by a signal, timed out, no fork)
    is tried again, and after PROBE_TRIES such tries ProbeInconclusive is raised."""
    global _probe
    if _probe is not None and not refresh:
        return _probe
    exe = shutil.which("bwrap")
    if exe is None:
        _probe = (None, "bubblewrap (bwrap) is not installed")
        return _probe
    why = ""
    for _ in range(PROBE_TRIES):
        verdict, why = _probe_once(exe)
        if verdict is not None:
            _probe = verdict
            return _probe
    raise ProbeInconclusive(f"the bwrap probe did not finish in {PROBE_TRIES} tries ({why}); "
                            "nothing says the host cannot sandbox", field="isolation")


def _probe_once(exe: str) -> tuple[tuple[str | None, str] | None, str]:
    """(the verdict, or None when this try says nothing about the host; why)."""
    view = SandboxView(ExecSpec(argv=["true"], cwd=Path("/"), timeout_s=20))
    argv = [exe, *BASE_FLAGS, "--unshare-net", *view.mount_args(), "--", "true"]
    try:
        done = view.run_probe(argv)
    except subprocess.TimeoutExpired as exc:
        return None, f"timed out: {exc}"
    except OSError as exc:
        if exc.errno in _TRANSIENT_ERRNOS:
            return None, f"could not start it: {exc}"
        return (None, f"bwrap probe failed: {exc}"), ""
    if done.returncode < 0:
        return None, f"killed by signal {-done.returncode}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        return (None, f"bwrap probe exited {done.returncode}: {why[-1] if why else 'no message'} "
                      "(user namespaces may be disabled on this host)"), ""
    return (exe, "ok"), ""


def _depth(path: Path) -> tuple[int, str]:
    return (len(path.parts), str(path))


@functools.lru_cache(maxsize=1)
def runtime_read_paths() -> frozenset[Path]:
    """The interpreter running sweep and sweep's own packages: what the oracle and the in-sandbox
    network relay need. The packages are bound one by one, not the checkout they live in (which
    may hold campaigns or secrets next to the code). Fixed for the process: computed once (each
    run asked for it twice, ~1 ms of path resolving each time)."""
    import roles
    import runstate
    import sweep
    out = {Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent}
    for module in (sweep, roles, runstate):
        if module.__file__ is not None:          # None only for a namespace package
            out.add(Path(module.__file__).resolve().parent)
    return frozenset(p.resolve() for p in out)


def _passwd_group() -> tuple[bytes, bytes]:
    uid, gid = os.getuid(), os.getgid()
    users = [f"root:x:0:0:root:{SANDBOX_HOME}:/bin/sh"]
    groups = ["root:x:0:"]
    if uid != 0:
        users.append(f"sweep:x:{uid}:{gid}:sweep session:{SANDBOX_HOME}:/bin/sh")
    if gid != 0:
        groups.append(f"sweep:x:{gid}:")
    users.append("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin")
    groups.append("nogroup:x:65534:")
    return ("\n".join(users) + "\n").encode(), ("\n".join(groups) + "\n").encode()


@dataclass
class SandboxView:
    """The mounts of one sandbox. Generated files (passwd, group, hosts) are passed to bwrap as
    sealed in-memory files (`--ro-bind-data FD`), so nothing is written on the host for them."""

    spec: ExecSpec
    extra_read: tuple[Path, ...] = ()
    hosts: bytes | None = None              # a generated /etc/hosts (network "api")
    relay_dir: Path | None = None           # host dir of relay sockets, shown at SANDBOX_RELAY_DIR
    share_resolver: bool = False            # network "host": the host's resolv.conf and hosts
    tmp_bytes: int = DEFAULT_TMP_BYTES
    data: dict[str, bytes] = field(default_factory=dict)

    def mount_args(self) -> list[str]:
        args: list[str] = []
        for name in SYSTEM_DIRS:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), str(host)]
            elif host.is_dir():
                args += ["--ro-bind", str(host), str(host)]
        args += ["--dir", "/etc"]
        for name in ETC_ALLOWED:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for pattern in ETC_TOOLCHAIN_GLOBS:
            for path in sorted(Path("/etc").glob(pattern)):
                args += ["--ro-bind-try", str(path), str(path)]
        passwd, group = _passwd_group()
        self.data = {"/etc/passwd": passwd, "/etc/group": group}
        if self.share_resolver:
            args += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf",
                     "--ro-bind-try", "/etc/hosts", "/etc/hosts"]
        else:
            self.data["/etc/hosts"] = self.hosts or b"127.0.0.1 localhost\n::1 localhost\n"
        args += ["--proc", "/proc", "--dev", "/dev", "--size", str(self.tmp_bytes), "--tmpfs", "/tmp",
                 "--dir", SANDBOX_HOME]
        if self.relay_dir is not None:
            args += ["--ro-bind", str(self.relay_dir), SANDBOX_RELAY_DIR]
        spec = self.spec
        writable = {Path(p).resolve() for p in spec.write_paths}
        readable = {Path(p).resolve() for p in (*spec.read_paths, *self.extra_read)}
        if Path(spec.cwd).resolve() != Path("/"):
            readable.add(Path(spec.cwd).resolve())
        readable = (readable | runtime_read_paths()) - writable
        view = tuple((Path(h).resolve(), t) for h, t in spec.view)
        # Parents before children (where the sandbox shows them): a later bind overlays an earlier
        # one, so `task/` (rw) must come after the workspace (ro) that contains it.
        for path in sorted(readable | writable, key=lambda p: _depth(Path(view_path(str(p), view)))):
            shown = view_path(str(path), view)
            if path in writable:
                args += ["--bind", str(path), shown]
            else:
                args += ["--ro-bind-try", str(path), shown]
        return args

    def data_fds(self) -> tuple[list[str], list[int]]:
        """bwrap arguments and the descriptors carrying the generated files (close after launch)."""
        args: list[str] = []
        fds: list[int] = []
        for dest, content in self.data.items():
            fd = os.memfd_create("sweep-" + dest.rsplit("/", 1)[-1], os.MFD_CLOEXEC)
            os.write(fd, content)
            os.lseek(fd, 0, os.SEEK_SET)
            fds.append(fd)
            args += ["--ro-bind-data", str(fd), dest]
        return args, fds

    def run_probe(self, argv: list[str]) -> subprocess.CompletedProcess:
        extra, fds = self.data_fds()
        full = [*argv[:argv.index("--")], *extra, *argv[argv.index("--"):]]
        try:
            return subprocess.run(full, stdin=subprocess.DEVNULL, capture_output=True, timeout=20,
                                  pass_fds=fds)
        finally:
            for fd in fds:
                os.close(fd)


def bwrap_argv(bwrap: str, cwd: Path | str, argv: list[str], *, unshare_net: bool, mounts: list[str],
               data_args: list[str], caps: tuple[str, ...] = ()) -> list[str]:
    """The full command line: bwrap flags, the view's mounts, the generated files, then `argv` run
    in `cwd` (the working directory as the sandbox shows it).
    `caps` are added back for the network relay only, which drops them before the program runs."""
    args = [bwrap, *BASE_FLAGS]
    for cap in caps:
        args += ["--cap-add", cap]
    if unshare_net:
        args.append("--unshare-net")
    args += mounts
    args += data_args
    args += ["--remount-ro", "/", "--chdir", str(cwd), "--", *argv]
    return args
