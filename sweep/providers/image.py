"""The image a remote sandbox runs: the task's environment/Dockerfile, named by a content hash.

`image_spec(environment_dir, agent_cli=...)` reads `environment/Dockerfile` and returns what a
remote provider builds: the Dockerfile text (plus the agent CLI's install layer when a session
needs one) and its identity, a sha256 over that text and every build-context file its COPY/ADD
lines name. Same environment -> same identity -> the provider reuses the image it built before
(Daytona: a snapshot named `sweep-img-<identity>`); any byte of the Dockerfile or its context
changed -> a new image.

`COPY repo/ ...` (the task's repository, see sweep/harbor/layout.py) is left out of the remote
image: every remote trial and session uploads its own repository (the starting one or the
solver's) as the workspace, so a baked-in copy would be replaced anyway, and leaving it out makes
every task of a project with the same Dockerfile share one image.
"""
from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from runstate.errors import ConfigError

# An agent CLI to install is given as its npm package spec (name@version): which one a runtime
# drives, at which pinned version, is that runtime's fact (RuntimeFacts.cli, sweep/runtimes/facts.py).
NPM_SPEC_RE = re.compile(r"^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*@[0-9A-Za-z][0-9A-Za-z.+_-]*$")
WORKSPACE_SOURCES = {"repo"}          # uploaded per run, never baked in (see the module docstring)
IMAGE_VERSION = "sweep-image-v1"      # bumps every identity if the way images are made changes
_INSTRUCTION_RE = re.compile(r"^\s*(COPY|ADD)\s+(.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class ImageSpec:
    dockerfile: str                   # what the provider builds (WORKSPACE_SOURCES copies left out)
    context_dir: Path                 # environment/: where COPY/ADD sources are read from
    context: tuple[str, ...]          # relative COPY/ADD sources that go into the build
    identity: str                     # sha256 hex of the Dockerfile text and the context files
    agent_cli: str | None = None      # the npm spec of the agent CLI the image installs, if any

    @property
    def name(self) -> str:
        """The provider-side name of the built image (a Daytona snapshot)."""
        return f"sweep-img-{self.identity[:32]}"


def agent_cli_layer(npm_spec: str) -> str:
    """The Dockerfile RUN line that installs an agent CLI (`package@version`, pinned) with npm
    (Node.js from the distribution when the image has no npm)."""
    if not NPM_SPEC_RE.match(npm_spec):
        raise ConfigError(f"{npm_spec!r} is not an npm package spec with a pinned version (name@version)",
                          field="runtimes")
    install = (f"(command -v npm >/dev/null 2>&1 || (apt-get update && apt-get install -y --no-install-recommends "
               f"nodejs npm && rm -rf /var/lib/apt/lists/*)) && npm install -g --no-audit --no-fund "
               f"{shlex.quote(npm_spec)}")
    return f"RUN {install}"


def _copy_sources(line: str) -> list[str] | None:
    """The context sources of a COPY/ADD line (None: not one, or one from another stage/URL)."""
    m = _INSTRUCTION_RE.match(line)
    if not m:
        return None
    args = m.group(2).strip()
    if args.startswith("["):
        import json
        try:
            parts = [str(p) for p in json.loads(args)]
        except ValueError:
            return None
    else:
        parts = shlex.split(args)
    flags = [p for p in parts if p.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return None
    paths = [p for p in parts if not p.startswith("--")]
    sources = paths[:-1]
    if any("://" in s for s in sources):
        return None
    return sources


def _logical_lines(text: str) -> list[str]:
    out: list[str] = []
    current = ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        out.append(current + raw)
        current = ""
    if current:
        out.append(current)
    return out


def _hash_path(h: "hashlib._Hash", root: Path, rel: str) -> None:
    base = (root / rel).resolve()
    if root.resolve() not in (base, *base.parents):
        raise ConfigError(f"environment/Dockerfile copies {rel!r}, which is outside environment/",
                          path=root / "Dockerfile", field="COPY")
    if not base.exists():
        raise ConfigError(f"environment/Dockerfile copies {rel!r}, which does not exist",
                          path=root / "Dockerfile", field="COPY")
    files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file() and not p.is_symlink())
    for p in files:
        h.update(b"F\0" + str(p.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())


def image_spec(environment_dir: str | Path, *, agent_cli: str | None = None) -> ImageSpec:
    env = Path(environment_dir)
    path = env / "Dockerfile"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the task's Dockerfile: {exc}", path=path) from None
    kept: list[str] = []
    context: list[str] = []
    for line in _logical_lines(text):
        sources = _copy_sources(line)
        if sources is not None:
            names = {s.strip("/").split("/")[0] for s in sources}
            if names and names <= WORKSPACE_SOURCES:
                continue
            context += [s for s in sources if s.strip("/") not in WORKSPACE_SOURCES]
        kept.append(line)
    if agent_cli is not None:
        kept.append(agent_cli_layer(agent_cli))
    dockerfile = "\n".join(kept).strip() + "\n"
    h = hashlib.sha256(f"{IMAGE_VERSION}\n".encode() + dockerfile.encode() + b"\0")
    for rel in sorted(set(context)):
        _hash_path(h, env, rel)
    return ImageSpec(dockerfile=dockerfile, context_dir=env, context=tuple(sorted(set(context))),
                     identity=h.hexdigest(), agent_cli=agent_cli)


__all__ = ["ImageSpec", "agent_cli_layer", "image_spec"]
