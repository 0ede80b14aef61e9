"""Write scopes: workspace-relative globs, how they match, and which directories they bind.

A scope is the list of paths a role may create, change or delete, as globs relative to the
session's workspace (`task/**`, `repo/**/*.py`). Two layers use it:
- the sandbox binds writable only the literal directory prefix of each glob (`task/**` -> `task`),
  which is coarse but enforced by the kernel;
- the audit after the session judges every changed path against the exact globs, so a write the
  bind allowed but the glob does not (`task/evil.sh` under `task/*.md`) still fails the session.

Glob syntax: `**` is any number of whole path segments (including none), `*` is any run of
characters inside one segment, `?` is one character inside a segment. Nothing else is special.
"""
from __future__ import annotations

import re
from functools import lru_cache

_WILDCARDS = set("*?[")


def glob_problem(pattern: object) -> str | None:
    """Why `pattern` is not an acceptable scope glob, or None. Checked at manifest load."""
    if not isinstance(pattern, str) or not pattern:
        return "a scope entry must be a non-empty string"
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in pattern):
        return f"scope entry {pattern!r} contains a control character"
    if pattern.startswith("/"):
        return f"scope entry {pattern!r} is absolute; scopes are relative to the workspace"
    if "\\" in pattern or "[" in pattern or "]" in pattern:
        return f"scope entry {pattern!r} uses '\\', '[' or ']', which scopes do not support"
    parts = pattern.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            return (f"scope entry {pattern!r} has an empty, '.' or '..' segment; "
                    "write it as a plain relative path like 'task/**'")
        if "**" in part and part != "**":
            return f"scope entry {pattern!r}: '**' must be a whole path segment"
    return None


@lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            # `a/**` matches `a` itself and everything below; `**/b` matches `b` at any depth.
            if last:
                out.append(".*" if i == 0 else "(?:/.*)?")
            else:
                out.append("(?:[^/]+/)*")
            continue
        seg = "".join("[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch) for ch in part)
        out.append(seg if last else seg + "/")
    regex = "".join(out)
    # `a/**` compiled to `a/(?:/.*)?`: drop the separator doubled by the trailing `**`.
    regex = regex.replace("/(?:/.*)?", "(?:/.*)?")
    return re.compile(regex + r"\Z", re.DOTALL)


def scope_matches(path: str, scope: list[str] | tuple[str, ...]) -> bool:
    """True when the workspace-relative posix `path` is inside one of the scope globs."""
    return any(_compile(pattern).match(path) for pattern in scope)


def scope_could_contain(directory: str, scope: list[str] | tuple[str, ...]) -> bool:
    """True when some path below `directory` could match the scope (so the directory may exist)."""
    prefix = directory.rstrip("/") + "/"
    for pattern in scope:
        root = bind_root(pattern)
        if root == "" or (root + "/").startswith(prefix) or prefix.startswith(root + "/"):
            return True
    return False


def bind_root(pattern: str) -> str:
    """The literal directory prefix of a glob: what the sandbox binds writable.

    `task/**` -> `task`; `repo/**/*.py` -> `repo`; `**` -> `` (the whole workspace); a fully literal
    path like `notes.md` -> its parent (`` here), because a file that does not exist yet cannot be a
    bind target; the audit still confines the session to the file itself.
    """
    parts = pattern.split("/")
    literal: list[str] = []
    for part in parts:
        if _WILDCARDS & set(part):
            break
        literal.append(part)
    else:
        literal = literal[:-1]
    return "/".join(literal)


def bind_roots(scope: list[str] | tuple[str, ...]) -> list[str]:
    """The minimal set of directories to bind writable for `scope` (nested roots collapse)."""
    roots = sorted({bind_root(p) for p in scope}, key=lambda r: (r.count("/"), r))
    kept: list[str] = []
    for root in roots:
        if any(root == k or k == "" or root.startswith(k + "/") for k in kept):
            continue
        kept.append(root)
    return kept
