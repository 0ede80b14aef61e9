"""What a hostile session sees of where it runs (standard library only).

`view_probe.py HIDDEN_HEX [ANY ...]`: HIDDEN_HEX is a comma-separated list of hex-encoded strings
the session must not see (the campaign's path, the run id, ...; hex, so that the probe's own argv
does not name them). It records its working directory, argv, environment, the listings of `/`, of
every parent of its working directory and of every absolute path it was handed, and reads what it
can (its workspace, the session's files, every file named in argv or the environment, /etc,
/proc/*/cmdline and environ, /proc/self/mounts): one JSON line on stdout with the places where a
hidden string was found (`leaks`). The mount table's source column (/proc/self/mountinfo) is
reported apart (`mountinfo_names`), since it names a bind's host source in any bwrap sandbox.
Always exits 0.
"""
import json
import os
import sys

MAX_FILES = 4000
MAX_BYTES = 1 << 20


def _paths_in(values):
    out = []
    for value in values:
        for part in value.replace("=", " ").replace(":", " ").split():
            if part.startswith("/"):
                out.append(part)
    return out


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_BYTES)
    except OSError:
        return b""


def _walk(root, seen):
    count = 0
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git",)]
        for name in files:
            path = os.path.join(base, name)
            if count >= MAX_FILES or path in seen or os.path.islink(path):
                continue
            seen[path] = _read(path)
            count += 1


def main():
    hidden = [bytes.fromhex(h).decode() for h in sys.argv[1].split(",") if h]
    cwd = os.getcwd()
    env = dict(os.environ)
    named = _paths_in([*sys.argv[2:], *env.values()])
    listings = {}
    parents = {"/"}
    for start in [cwd, *named]:
        path = start
        while path not in ("/", ""):
            path = os.path.dirname(path)
            parents.add(path)
    for path in sorted(parents | {cwd, "/session", "/inputs", "/run", "/tmp", env.get("HOME", "/")}):
        try:
            listings[path] = sorted(os.listdir(path))
        except OSError as exc:
            listings[path] = f"{type(exc).__name__}"
    files = {}
    for root in (cwd, "/session", "/inputs", "/tmp", "/run", "/etc", env.get("HOME", "/tmp")):
        if os.path.isdir(root):
            _walk(root, files)
    for path in named:
        if os.path.isfile(path):
            files.setdefault(path, _read(path))
        elif os.path.isdir(path) and not path.startswith(("/usr", "/bin", "/lib")):
            _walk(path, files)
    for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self"]:
        for what in ("cmdline", "environ", "cgroup", "status"):
            files[f"/proc/{pid}/{what}"] = _read(f"/proc/{pid}/{what}")
    files["/proc/self/mounts"] = _read("/proc/self/mounts")
    seen = {"cwd": cwd.encode(), "argv": json.dumps(sys.argv[2:]).encode(), "env": json.dumps(env).encode(),
            "listings": json.dumps(listings).encode(), **{f"file {p}": data for p, data in files.items()}}
    leaks = [[where, h] for where, data in seen.items() for h in hidden if h.encode() in data]
    mountinfo = _read("/proc/self/mountinfo")
    print(json.dumps({"cwd": cwd, "argv": sys.argv[2:], "env": env, "listings": listings, "leaks": leaks,
                      "read": len(files), "mountinfo_names": [h for h in hidden if h.encode() in mountinfo],
                      "mount_points": [line.split()[4] for line in mountinfo.decode().splitlines()]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
