"""Every git command sweep runs, under one policy (stdlib only).

Repositories are untrusted (a PR's tree, its commit messages, its paths, its `.git/config`,
its `.gitattributes`), so:
- intake copies the two commits of a PR into a private bare repository sweep creates
  (`init_private_repo`: no template, so no hooks and no info/attributes; a fresh config), and every
  later command runs there, never in the candidate's repository;
- every command ignores the system and global config (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL=
  /dev/null), system attributes and replace refs, and gets `-c` settings that switch off hooks,
  fsmonitor, the attributes file, an external diff, the pager and submodule recursion (HARDENING):
  a filter driver, textconv, `core.fsmonitor`, `core.hooksPath`, `diff.external`, `core.pager` or a
  `file://` submodule of the candidate never runs a program or reads a host path;
- argv lists only, never a shell; paths go to git on stdin (`--index-info -z`, `cat-file
  --batch`), never as arguments, so 100,000 of them fit;
- a minimal environment (PATH, LC_ALL=C so messages parse the same everywhere, no terminal prompt,
  no optional locks), stdin closed unless it feeds git, a timeout and an address-space bound on
  every call (GIT_MEMORY_BYTES; git's pack windows and caches sized to fit under it);
- a tree is exported as exactly the commit's tree (`export_tree`): the entries of `git ls-tree`,
  their bytes from `git cat-file --batch`, written into files sweep creates relative to directory
  descriptors opened with O_NOFOLLOW. No `git archive` (its export-subst and export-ignore rewrite
  the tree, and its filters run programs), no tar, no unpacking: nothing can be written outside the
  destination, zeros stay holes, and a tree over the caller's bound is refused before any byte.
"""
from __future__ import annotations

import errno
import os
import resource
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sweep.tree import DirFds, write_stream

GIT_TIMEOUT_S = 300
GIT_MEMORY_BYTES = 3 << 30          # address space of one host git process
# Settings every command gets (the command line outranks the repository's own config).
HARDENING = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.attributesFile=/dev/null",
    "core.pager=cat", "diff.external=", "core.askPass=", "credential.helper=",
    "submodule.recurse=false", "fetch.recurseSubmodules=false", "protocol.file.allow=user",
    "gc.auto=0", "maintenance.auto=false", "core.untrackedCache=false", "core.splitIndex=false",
    "core.packedGitLimit=1g", "core.packedGitWindowSize=64m", "core.deltaBaseCacheLimit=64m",
    "core.bigFileThreshold=16m", "pack.windowMemory=256m", "pack.threads=1",
)
_CHUNK = 1 << 20
_TREE_ERRNOS = {errno.EEXIST, errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG}


class GitFailed(Exception):
    """A git command failed or timed out; `message` is one line for the run's record.

    `unsafe`: the repository itself cannot be handled (an entry sweep refuses, a tree over the
    bound): the same on every attempt, so callers end the run instead of retrying."""

    def __init__(self, message: str, *, timed_out: bool = False, unsafe: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.timed_out = timed_out
        self.unsafe = unsafe


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0",
           "GIT_OPTIONAL_LOCKS": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_ATTR_NOSYSTEM": "1", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_PAGER": "cat", "PAGER": "cat",
           "HOME": "/nonexistent"}
    env.update(extra or {})
    return env


def _bound_memory() -> None:     # pragma: no cover - runs in the child between fork and exec
    resource.setrlimit(resource.RLIMIT_AS, (GIT_MEMORY_BYTES, GIT_MEMORY_BYTES))


def git_argv(args: Sequence[str], repo: str | Path | None = None) -> list[str]:
    hardening = [x for setting in HARDENING for x in ("-c", setting)]
    return ["git", *(["-C", str(repo)] if repo is not None else []), *hardening, *args]


def _subcommand(args: Sequence[str]) -> str:
    skip = False
    for a in args:                      # the first word that is not an option
        if skip or a in ("-c", "-C"):
            skip = not skip
            continue
        if not a.startswith("-"):
            return a
    return "git"


def _last_line(err: bytes, rc: int) -> str:
    lines = err.decode(errors="replace").strip().splitlines()
    return lines[-1][-400:] if lines else f"exit {rc}"


def run_git(args: Sequence[str], *, repo: str | Path | None = None, timeout: float = GIT_TIMEOUT_S,
            env: Mapping[str, str] | None = None, input: bytes | None = None) -> bytes:
    """`git [-C repo] HARDENING ARGS...`; its stdout. Raises GitFailed naming the subcommand."""
    what = _subcommand(args)
    try:
        done = subprocess.run(git_argv(args, repo), input=input, stdin=None if input is not None else subprocess.DEVNULL,
                              capture_output=True, timeout=timeout, env=git_env(env), preexec_fn=_bound_memory)
    except subprocess.TimeoutExpired:
        raise GitFailed(f"git {what} timed out after {timeout:.0f}s", timed_out=True) from None
    except OSError as exc:
        raise GitFailed(f"cannot run git: {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise GitFailed(f"git {what} failed: {_last_line(done.stderr, done.returncode)}")
    return done.stdout


def open_git(args: Sequence[str], *, repo: str | Path | None = None, env: Mapping[str, str] | None = None,
             stdin: int | None = subprocess.DEVNULL) -> subprocess.Popen:
    """A streaming git process (stdout and stderr piped) under the same policy as run_git."""
    try:
        return subprocess.Popen(git_argv(args, repo), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=git_env(env), preexec_fn=_bound_memory)
    except OSError as exc:
        raise GitFailed(f"cannot run git: {exc.strerror or exc}") from None


def init_private_repo(path: Path) -> None:
    """A bare repository of sweep's own at `path`: no template (no hooks, no info/ files), the
    config git writes and nothing else."""
    run_git(["init", "--quiet", "--bare", "--template=", "--", str(path)])


def fetch_commits(repo: Path, source: str, wants: Mapping[str, str], *, timeout: float = GIT_TIMEOUT_S,
                  depth: int | None = 1) -> None:
    """Fetch `source`'s objects named in `wants` (local ref -> commit sha or source ref) into the
    private `repo`. depth=1: the trees of those commits, not their history."""
    refspecs = [f"+{src}:{dst}" for dst, src in wants.items()]
    run_git(["fetch", "--quiet", "--no-tags", "--no-recurse-submodules", "--no-write-fetch-head",
             *([f"--depth={depth}"] if depth else []), "--end-of-options", source, *refspecs], repo=repo,
            timeout=timeout)


# ---- the commit's tree, exactly ------------------------------------------------------------------

@dataclass(frozen=True)
class TreeEntry:
    mode: str
    kind: str          # blob, commit (a submodule's gitlink)
    sha: str
    size: int
    path: str


def tree_entries(repo: str | Path, commit: str, *, timeout: float = GIT_TIMEOUT_S) -> list[TreeEntry]:
    """Every entry of `commit`'s tree (recursive; sizes from the object headers, no content read)."""
    raw = run_git(["ls-tree", "-r", "-z", "--long", "--full-tree", "--end-of-options", f"{commit}^{{tree}}"],
                  repo=repo, timeout=timeout)
    out = []
    for record in raw.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, kind, sha, size = meta.decode().split()
        try:
            name = path.decode("utf-8")
        except UnicodeDecodeError:
            raise GitFailed(f"the tree has a path that is not UTF-8: {path[:80]!r}", unsafe=True) from None
        out.append(TreeEntry(mode, kind, sha, int(size) if size != "-" else 0, name))
    return out


def _entry_problem(entry: TreeEntry) -> str | None:
    parts = entry.path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return f"{entry.path!r} has an empty, '.' or '..' segment"
    if any(p.lower() == ".git" for p in parts):
        return f"{entry.path!r} is inside a .git directory"
    if entry.mode not in ("100644", "100755", "120000", "160000"):
        return f"{entry.path!r} has mode {entry.mode}"
    return None


def _link_problem(path: str, target: bytes) -> str | None:
    try:
        text = target.decode("utf-8")
    except UnicodeDecodeError:
        return f"symlink {path!r} has a target that is not UTF-8"
    if not text or "\0" in text or len(text) > 4095:
        return f"symlink {path!r} has an unusable target"
    if text.startswith("/"):
        return f"symlink {path!r} points to the absolute path {text!r}"
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), text))
    if resolved == ".." or resolved.startswith("../"):
        return f"symlink {path!r} points out of the tree ({text!r})"
    return None


def _feed(stdin, shas: Iterable[str]) -> None:
    try:
        for sha in shas:
            stdin.write(sha.encode() + b"\n")
        stdin.close()
    except (BrokenPipeError, ValueError, OSError):
        pass            # cat-file died or was killed: the reader reports it


def export_tree(repo: str | Path, commit: str, dest: Path, *, timeout: float = GIT_TIMEOUT_S,
                max_bytes: int | None = None) -> int:
    """Write exactly the tree of `commit` into `dest` (created if needed; an existing dest must be a
    real directory); returns the bytes written (apparent size). Files 0600 (0700 if executable),
    directories 0700, symlinks as links, a submodule as an empty directory. Raises GitFailed;
    unsafe=True for what the repository itself makes impossible: a `.`/`..`/`.git` segment, a link
    out of the tree, a non-UTF-8 path, or more than `max_bytes` (checked before anything is written)."""
    entries = tree_entries(repo, commit, timeout=timeout)
    for entry in entries:
        why = _entry_problem(entry)
        if why:
            raise GitFailed(f"the repository has an entry unsafe to write: {why}", unsafe=True)
    total = sum(e.size for e in entries if e.kind == "blob" and e.mode != "120000")
    if max_bytes is not None and total > max_bytes:
        raise GitFailed(f"the tree of {commit[:12]} holds {total} bytes, more than the workspace bound "
                        f"({max_bytes} bytes); it is not exported", unsafe=True)
    dest.mkdir(parents=True, exist_ok=True)
    blobs = [e for e in entries if e.kind == "blob"]
    proc = open_git(["cat-file", "--batch"], repo=repo, stdin=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None   # noqa: S101
    feeder = threading.Thread(target=_feed, args=(proc.stdin, [e.sha for e in blobs]), daemon=True)
    feeder.start()
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    started = time.monotonic()
    dirs = DirFds(dest)
    try:
        for entry in entries:
            *parents, name = entry.path.split("/")
            try:
                parent = dirs.at(parents)
                if entry.kind == "commit":
                    os.mkdir(name, 0o700, dir_fd=parent)
                    continue
                header = proc.stdout.readline().split()
                if len(header) != 3 or header[0].decode() != entry.sha or int(header[2]) != entry.size:
                    raise GitFailed(f"git cat-file answered {b' '.join(header)[:120]!r} for {entry.path!r}")
                if entry.mode == "120000":
                    target = proc.stdout.read(entry.size) if entry.size <= 4095 else b""
                    if entry.size > 4095:
                        raise GitFailed(f"the repository has an entry unsafe to write: symlink {entry.path!r} "
                                        "has an unusable target", unsafe=True)
                    why = _link_problem(entry.path, target)
                    if why:
                        raise GitFailed(f"the repository has an entry unsafe to write: {why}", unsafe=True)
                    os.symlink(target.decode(), name, dir_fd=parent)
                else:
                    mode = 0o700 if entry.mode == "100755" else 0o600
                    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                                 dir_fd=parent)
                    try:
                        write_stream(proc.stdout, entry.size, fd)
                        os.fchmod(fd, mode)
                    finally:
                        os.close(fd)
                proc.stdout.read(1)         # the newline after each object
            except OSError as exc:
                # a name met twice, a link or a file where a directory goes: the tree's doing;
                # a full disk or a permission problem is the host's and may pass
                raise GitFailed(f"cannot write {entry.path!r} of the tree: {exc.strerror or exc}",
                                unsafe=exc.errno in _TREE_ERRNOS) from None
    except GitFailed:
        proc.kill()
        if time.monotonic() - started >= timeout:
            raise GitFailed(f"git cat-file timed out after {timeout:.0f}s", timed_out=True) from None
        raise
    finally:
        dirs.close()
        killer.cancel()
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
        rc = proc.wait()
        feeder.join(5)
    if rc != 0:
        raise GitFailed(f"git cat-file failed: {_last_line(err, rc)}")
    return total


def write_blobs(repo: str | Path, items: Sequence[tuple[str, Path]], *, timeout: float = GIT_TIMEOUT_S) -> None:
    """Each blob `sha` streamed into its new file `path` (parents created; 0600; the file must not
    exist, and is opened with O_NOFOLLOW), the shas on cat-file's stdin: no path on argv."""
    proc = open_git(["cat-file", "--batch"], repo=repo, stdin=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None   # noqa: S101
    feeder = threading.Thread(target=_feed, args=(proc.stdin, [sha for sha, _ in items]), daemon=True)
    feeder.start()
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        for sha, path in items:
            header = proc.stdout.readline().split()
            if len(header) != 3 or header[0].decode() != sha or header[1] != b"blob":
                raise GitFailed(f"git cat-file answered {b' '.join(header)[:120]!r} for {path.name!r}")
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                write_stream(proc.stdout, int(header[2]), fd)
            finally:
                os.close(fd)
            proc.stdout.read(1)
    except GitFailed:
        proc.kill()
        raise
    except OSError as exc:
        proc.kill()
        raise GitFailed(f"cannot write a blob of the PR: {exc.strerror or exc}") from None
    finally:
        killer.cancel()
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
        rc = proc.wait()
        feeder.join(5)
    if rc != 0:
        raise GitFailed(f"git cat-file failed: {_last_line(err, rc)}")


def diff_restoring(repo: str | Path, base: str, head: str, restore: Mapping[str, tuple[str, str] | None],
                   args: Sequence[str], *, timeout: float = GIT_TIMEOUT_S, limit: int | None = None) -> bytes:
    """`git diff ARGS base T`, T being head's tree with every path of `restore` put back as base has
    it ((mode, sha)) or removed (None): the PR's diff without those paths, however many, and none
    of them on argv (they go through a temporary index on stdin). The tree objects this makes go
    to a temporary object directory, so a read-only repository works. With `limit`, at most
    limit + 1 bytes are read (streamed; git is stopped there), so a caller can tell it was cut."""
    import tempfile
    objects = run_git(["rev-parse", "--path-format=absolute", "--git-path", "objects"], repo=repo,
                      timeout=timeout).decode().strip()
    with tempfile.TemporaryDirectory(prefix="sweep-git-") as tmp:
        os.mkdir(os.path.join(tmp, "objects"))
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index"), "GIT_OBJECT_DIRECTORY": os.path.join(tmp, "objects"),
               "GIT_ALTERNATE_OBJECT_DIRECTORIES": objects}
        run_git(["read-tree", "--end-of-options", f"{head}^{{tree}}"], repo=repo, env=env, timeout=timeout)
        info = b"".join((f"{entry[0]} {entry[1]}" if entry else f"0 {'0' * len(base)}").encode()
                        + b"\t" + path.encode() + b"\0" for path, entry in restore.items())
        run_git(["update-index", "-z", "--index-info"], repo=repo, env=env, input=info, timeout=timeout)
        tree = run_git(["write-tree"], repo=repo, env=env, timeout=timeout).decode().strip()
        if limit is None:
            return run_git(["diff", *args, base, tree, "--"], repo=repo, env=env, timeout=timeout)
        return read_capped(["diff", *args, base, tree, "--"], repo=repo, env=env, limit=limit, timeout=timeout)


def read_capped(args: Sequence[str], *, repo: str | Path, limit: int, timeout: float = GIT_TIMEOUT_S,
                env: Mapping[str, str] | None = None) -> bytes:
    """The first limit + 1 bytes of a git command's stdout, streamed: git is killed once they are
    read (or at the timeout), so its output never sits whole in memory."""
    proc = open_git(args, repo=repo, env=env)
    assert proc.stdout is not None and proc.stderr is not None   # noqa: S101 - both are PIPEs
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    chunks, got = [], 0
    try:
        while got <= limit:
            chunk = proc.stdout.read(min(_CHUNK, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    finally:
        cut = got > limit
        if cut:
            proc.kill()
        killer.cancel()
        proc.stdout.close()
        err = proc.stderr.read(1 << 16)
        proc.stderr.close()
        rc = proc.wait()
    if not cut and rc != 0:
        raise GitFailed(f"git {_subcommand(args)} failed: {_last_line(err, rc)}", timed_out=rc == -9)
    return b"".join(chunks)


def object_sizes(repo: str | Path, shas: Iterable[str], *, timeout: float = GIT_TIMEOUT_S) -> dict[str, int]:
    """sha -> size for each object (`cat-file --batch-check`, shas on stdin; missing ones left out)."""
    wanted = sorted(set(shas))
    out = run_git(["cat-file", "--batch-check"], repo=repo, input="".join(f"{s}\n" for s in wanted).encode(),
                  timeout=timeout)
    sizes = {}
    for line in out.decode(errors="replace").splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2].isdigit():
            sizes[fields[0]] = int(fields[2])
    return sizes


def raw_changes(repo: str | Path, base: str, head: str, *, timeout: float = GIT_TIMEOUT_S) -> list[tuple[str, ...]]:
    """(status, path, old mode, old sha, new mode, new sha) per path the commits differ in: a tree
    comparison, no content read (`diff --raw -z --no-renames`)."""
    out = run_git(["diff", "--raw", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", "--no-abbrev",
                   base, head, "--"], repo=repo, timeout=timeout)
    fields = out.split(b"\0")
    changes: list[tuple[str, ...]] = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta:
            break
        old_mode, new_mode, old_sha, new_sha, status = meta.decode().lstrip(":").split()
        changes.append((status[:1], path.decode("utf-8", errors="surrogateescape"), old_mode, old_sha,
                        new_mode, new_sha))
    return changes
