"""The task image, derived from the task's test command: one Debian base, the language's toolchain.

`derive_image(test_argv, repo)` says which language the test command is written in (Python, Node,
Go, Rust, Java), and writes the Dockerfile that gives it that toolchain: the pinned Debian bookworm
base, the toolchain from Debian's own packages (the ones CI installs on the host), the project's
declared dependencies, and a non-root `agent` user (uid 1000) who owns /app. The oracle author writes it into
every bundle (sweep/harbor/pr_bundle.py), a remote provider builds exactly that file (container
fidelity, sweep/providers/image.py), and `sweep export` derives the same one for a task whose gates
ran on the host toolchain.

`runs_command(image, test_argv)` is the check the export makes before it calls a task verified: the
test command's program is one the image puts on PATH. A host path (`/root/.venv/bin/python`) or a
program of another language (`node` on a Python image) is not.

Only fixed lines are written: which dependency files exist at the base commit decides which lines
appear; no file content, no PR text and no test-command word reaches the Dockerfile.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from runstate.errors import ConfigError

# Pinned by tag and digest (the tag says what it is, the digest fixes the bytes). The digest is one
# recorded publicly for that tag; this machine has no registry, so it was not re-checked here.
# Override with `sweep export --base-image NAME:TAG@sha256:DIGEST` (docs/export.md).
DEFAULT_BASE_IMAGE = ("debian:bookworm-slim@sha256:"
                      "4b50eb66f977b4062683ff434ef18ac191da862dbe966961bc11990cf5791a8d")
PYTEST_PIN = "pytest==8.3.3"
AGENT_USER = "agent"
AGENT_UID = 1000
PYTHON, NODE, GO, RUST, JAVA = "python", "node", "go", "rust", "java"
LANGUAGES = (PYTHON, NODE, GO, RUST, JAVA)

# program (the test command's first word, or the one after `npx`/`env`) -> language
_PROGRAMS = {
    "python": PYTHON, "python3": PYTHON, "pytest": PYTHON, "py.test": PYTHON, "tox": PYTHON,
    "node": NODE, "npm": NODE, "npx": NODE, "jest": NODE, "vitest": NODE, "mocha": NODE,
    "go": GO, "cargo": RUST, "mvn": JAVA, "gradle": JAVA, "java": JAVA, "mvnw": JAVA, "gradlew": JAVA,
}
# Debian packages of each toolchain (git and ca-certificates come with every image)
_PACKAGES = {
    PYTHON: ("python3", "python3-venv"),
    NODE: ("nodejs", "npm"),
    GO: ("golang-go",),
    RUST: ("rustc", "cargo"),
    # junit5: JUnit's console launcher (/usr/share/java/junit-platform-console-standalone.jar), what a
    # repository's own test script runs when it has no build tool (the one CI installs on the host)
    JAVA: ("default-jdk-headless", "maven", "junit5"),
}
# a test runner the command names bare, installed globally at a pinned version (the project's own,
# from its node_modules/.bin, comes first on PATH); the version CI installs on the host
_NODE_RUNNERS = {"jest": "jest@29.7.0"}
# a repository's own script run by a shell (`sh run-tests.sh`): its language is its sources'
_SHELLS = ("sh", "bash")
_SOURCE_SUFFIXES = {".py": PYTHON, ".js": NODE, ".mjs": NODE, ".cjs": NODE, ".ts": NODE, ".go": GO, ".rs": RUST,
                    ".java": JAVA, ".kt": JAVA}
_MAX_SCANNED = 20_000
# programs each image has on PATH (what runs_command accepts)
_PROVIDES = {
    PYTHON: ("python", "python3", "pip", "pip3"),
    NODE: ("node", "npm", "npx"),
    GO: ("go", "gofmt"),
    RUST: ("cargo", "rustc"),
    JAVA: ("java", "javac", "mvn"),
}
_PYTHON_REQUIREMENTS = ("requirements.txt", "requirements-dev.txt", "requirements-test.txt",
                        "test-requirements.txt")


@dataclass(frozen=True)
class TaskImage:
    language: str
    base_image: str
    dockerfile: str
    programs: tuple[str, ...]          # on PATH in the image (plus the repository's own scripts)


def _program(argv: list[str]) -> str:
    """The program that decides the language: `npx jest` -> jest, `env X=1 cargo` -> cargo."""
    words = list(argv)
    while words and (os.path.basename(words[0]) == "env" or "=" in words[0]):
        words.pop(0)
    return words[0] if words else ""


def language_of(test_argv: list[str]) -> str | None:
    """The language of the test command, or None when its program is none sweep knows."""
    name = os.path.basename(_program(test_argv))
    if name.startswith("python3."):
        name = "python3"
    return _PROGRAMS.get(name)


def sources_language(repo: str | os.PathLike[str]) -> str | None:
    """The language most of the repository's source files are written in (by suffix; a bounded
    walk, hidden directories skipped), or None when it has none sweep knows."""
    counts: dict[str, int] = {}
    seen = 0
    for _root, dirs, files in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "node_modules")
        for name in files:
            language = _SOURCE_SUFFIXES.get(os.path.splitext(name)[1])
            if language:
                counts[language] = counts.get(language, 0) + 1
            seen += 1
        if seen > _MAX_SCANNED:
            break
    return max(sorted(counts), key=lambda lang: counts[lang]) if counts else None


def task_language(test_argv: list[str], repo: str | os.PathLike[str]) -> str | None:
    """The test command's language; for a repository's own script run by a shell, its sources'."""
    language = language_of(test_argv)
    if language is None and os.path.basename(_program(test_argv)) in _SHELLS:
        return sources_language(repo)
    return language


def check_base_image(image: str) -> str:
    name, sep, digest = image.partition("@sha256:")
    if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or ":" not in name:
        raise ConfigError(f"base image {image!r} is not pinned: expected NAME:TAG@sha256:<64 hex digits>",
                          field="--base-image")
    if any(ch.isspace() for ch in image):
        raise ConfigError(f"base image {image!r} contains whitespace", field="--base-image")
    return image


def _dependency_lines(language: str, files: set[str]) -> list[str]:
    """The project's declared dependencies, installed from the repository copied to /app."""
    lines: list[str] = []
    if language == PYTHON:
        lines += [f"RUN python3 -m pip install -r {req}" for req in _PYTHON_REQUIREMENTS if req in files]
        if files & {"pyproject.toml", "setup.py", "setup.cfg"}:
            lines.append("RUN python3 -m pip install -e .")
    elif language == NODE and "package.json" in files:
        lines.append("RUN npm ci --no-audit --no-fund" if "package-lock.json" in files
                     else "RUN npm install --no-audit --no-fund")
    elif language == GO and "go.mod" in files:
        lines.append("RUN go mod download")
    elif language == RUST and "Cargo.toml" in files:
        lines.append("RUN cargo fetch")
    elif language == JAVA and "pom.xml" in files:
        lines.append("RUN mvn -q -B dependency:go-offline")
    return lines


def derive_image(test_argv: list[str], repo_files: set[str], *, base_image: str = DEFAULT_BASE_IMAGE,
                 dependencies: bool = True, language: str | None = None) -> TaskImage:
    """The image for a task whose tests run with `test_argv` in a repository whose top-level file
    names are `repo_files`. An unknown program gets the Python image (sweep's own default) and
    `runs_command` says it cannot run there.

    `dependencies=False` leaves out the lines that install the project's dependencies from the
    repository: a remote provider builds the image without the repository (it uploads each run's
    own, sweep/providers/image.py), so the author's bundle carries the toolchain only, and the gates
    verify in that image. The image's default user stays root (a remote provider installs an agent
    CLI on top of it); Harbor runs the agent as `agent` from task.toml's `[agent] user`.
    `language` (from `task_language`) decides for a command whose program says none (a shell script)."""
    check_base_image(base_image)
    language = language_of(test_argv) or language or PYTHON
    packages = " ".join(("git", "ca-certificates", *_PACKAGES[language]))
    lines = [
        f"# Task image written by sweep for a {language} test command (sweep/harbor/images.py).",
        "# The base image is pinned by digest; the toolchain comes from Debian's packages.",
        f"FROM {base_image}",
        f"RUN apt-get update && apt-get install -y --no-install-recommends {packages} "
        "&& rm -rf /var/lib/apt/lists/*",
    ]
    if language == PYTHON:
        # Debian's python3 refuses system-wide pip installs (PEP 668): the project gets a venv on PATH
        lines += ["RUN python3 -m venv /opt/venv",
                  "ENV PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "
                  "PYTHONDONTWRITEBYTECODE=1"]
    elif language == NODE:
        lines.append("ENV PATH=/app/node_modules/.bin:$PATH")
    elif language == GO:
        lines.append("ENV GOPATH=/opt/go GOCACHE=/opt/go/cache GOFLAGS=-mod=mod")
    elif language == RUST:
        lines.append("ENV CARGO_HOME=/opt/cargo")
    elif language == JAVA:
        lines.append("ENV MAVEN_OPTS=-Dmaven.repo.local=/opt/m2")
    lines += [
        f"RUN groupadd --gid {AGENT_UID} {AGENT_USER} && useradd --uid {AGENT_UID} --gid {AGENT_UID} "
        f"--create-home --shell /bin/bash {AGENT_USER}",
        "WORKDIR /app",
        "COPY repo/ /app/",
    ]
    pytest = any("pytest" in arg for arg in test_argv)
    if language == PYTHON and pytest:
        lines.append(f"RUN python3 -m pip install '{PYTEST_PIN}'")
    runner = os.path.basename(_program(test_argv))
    if language == NODE and runner in _NODE_RUNNERS:
        lines.append(f"RUN npm install -g --no-audit --no-fund '{_NODE_RUNNERS[runner]}'")
    if dependencies:
        lines += _dependency_lines(language, repo_files) or [
            "# the project declares no dependencies sweep installs for this language"]
    owned = {GO: " /opt/go", RUST: " /opt/cargo", JAVA: " /opt/m2"}.get(language, "")
    if owned:
        lines.append(f"RUN mkdir -p{owned} && chown -R {AGENT_USER}:{AGENT_USER} /app{owned}")
    else:
        lines.append(f"RUN chown -R {AGENT_USER}:{AGENT_USER} /app")
    lines.append("")
    programs = _PROVIDES[language] + _SHELLS + (("pytest", "py.test") if pytest and language == PYTHON else ()) + (
        (runner,) if language == NODE and runner in _NODE_RUNNERS else ())
    return TaskImage(language=language, base_image=base_image, dockerfile="\n".join(lines), programs=programs)


def runs_command(image: TaskImage, test_argv: list[str]) -> str | None:
    """Why `image` cannot run `test_argv`, or None when it can."""
    program = _program(test_argv)
    if not program:
        return "the test command is empty"
    if os.path.isabs(program):
        return (f"the test command's program is the host path {program!r}, which the image does not have "
                "(write the program's name, found on PATH)")
    if program.startswith(("./", "../")):
        return None                     # the repository's own script (mvnw, gradlew): it is in /app
    name = os.path.basename(program)
    if name.startswith("python3.") and image.language == PYTHON:
        return None
    if name in image.programs or (image.language == NODE and name in ("vitest", "mocha")):
        return None                     # vitest, mocha: the project's own, from its node_modules/.bin
    return (f"the test command runs {name!r}, which the {image.language} image does not provide "
            f"(it has: {', '.join(image.programs)})")


def repo_top_files(repo: str | os.PathLike[str]) -> set[str]:
    """The names of the regular files at the top of the repository (what decides the dependency lines)."""
    try:
        return {e.name for e in os.scandir(repo) if e.is_file(follow_symlinks=False)}
    except OSError:
        return set()
