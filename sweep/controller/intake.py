"""Intake: freeze the PR evidence into source.json (with its sha256).

Two sources: a local git repository with base and head refs, or a GitHub pull request through the
REST API (base URL configurable, token from a file or the environment) followed by a git fetch of
the PR's head. Nothing from the PR reaches a shell: git is run with argv lists, refs are validated,
and the token is passed in a header, never on a command line or into any file. The header follows
a redirect only to the same scheme, host and port: a redirect to another host (a hostile or
misconfigured API endpoint, a CDN) is followed without it, so the token never leaves for a host
the operator did not name.
"""
from __future__ import annotations

import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import orjson
from pydantic import ValidationError

from runstate.errors import describe_validation_error
from runstate.files import make_private_dir, write_atomic
from runstate.paths import SOURCE_FILE
from sweep.git import GitFailed, fetch_commits, run_git
from sweep.models.evidence import EVIDENCE_SCHEMA_VERSION, SourceEvidence, evidence_sha256, load_source
from sweep.models.plan import FrozenCandidate, github_pr

GIT_TIMEOUT_S = 300
API_TIMEOUT_S = 60


class IntakeFailed(Exception):
    """The PR cannot be taken in (missing repo, unknown ref, 404): the run ends blocked."""


class IntakeTransient(Exception):
    """A network or server problem: an ordinary failed attempt, worth retrying later."""


@dataclass
class GithubSettings:
    api_url: str = "https://api.github.com"
    token_file: str | None = None
    token_env: str | None = None          # the plan's `secrets.github.env`: a variable name

    @classmethod
    def from_env(cls) -> "GithubSettings":
        return cls(api_url=os.environ.get("SWEEP_GITHUB_API", cls.api_url).rstrip("/"),
                   token_file=os.environ.get("SWEEP_GITHUB_TOKEN_FILE"))

    @classmethod
    def for_campaign(cls, settings) -> "GithubSettings":
        """From the environment, with the plan's `[secrets] github` (a file or a variable) first."""
        from sweep.credentials import github_token_source, secret_file_problem
        base = cls.from_env()
        token_file, token_env = github_token_source(settings)
        if token_file:
            problem = secret_file_problem(Path(token_file))
            if problem:
                raise IntakeFailed(f"secrets.github.file: {problem}")
            return cls(api_url=base.api_url, token_file=token_file)
        if token_env:
            return cls(api_url=base.api_url, token_env=token_env)
        return base

    def token(self) -> str | None:
        if self.token_env:
            return os.environ.get(self.token_env) or None
        if self.token_file:
            try:
                return Path(self.token_file).read_text().strip() or None
            except OSError as exc:
                raise IntakeFailed(f"cannot read the GitHub token file {self.token_file}: {exc.strerror}") from exc
        return os.environ.get("GITHUB_TOKEN") or None


def _git(*args: str, cwd: Path | None = None) -> str:
    try:
        return run_git(args, repo=cwd, timeout=GIT_TIMEOUT_S).decode("utf-8", errors="replace")
    except GitFailed as exc:
        if exc.timed_out:
            raise IntakeTransient(exc.message) from None
        raise IntakeFailed(exc.message) from None


def take_in(rdir: Path, fc: FrozenCandidate, github: GithubSettings | None = None) -> SourceEvidence:
    existing = load_source(rdir)
    if existing is not None:
        return existing
    cand = fc.candidate
    if cand.url:
        evidence = _from_github(rdir, cand.url, github or GithubSettings.from_env())
    else:
        try:
            repo, base, head = cand.local_source()
        except ValueError as exc:
            raise IntakeFailed(str(exc)) from None
        evidence = _from_local(rdir, repo, base, head, cand.title, cand.body)
    evidence["test_command"] = cand.options.test_command
    if cand.options.test_workdir:
        evidence["test_workdir"] = cand.options.test_workdir
    evidence["pr_key"] = fc.pr_key
    evidence["frozen_at"] = time.time()
    evidence["schema_version"] = EVIDENCE_SCHEMA_VERSION      # inside the checksum like every other field
    evidence["evidence_sha256"] = evidence_sha256(evidence)
    try:
        frozen = SourceEvidence.model_validate(evidence)     # what is written is what load_source reads back
    except ValidationError as exc:
        raise IntakeFailed(f"the PR's source does not read as SourceEvidence: {describe_validation_error(exc)}") from None
    write_atomic(Path(rdir) / SOURCE_FILE, orjson.dumps(evidence, option=orjson.OPT_INDENT_2))
    return frozen


def _resolve(repo: Path, ref: str) -> str:
    return _git("rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}", cwd=repo).strip()


def _resolve_in_candidate(path: Path, refs: list[str]) -> list[str]:
    """The commits `refs` name in the candidate's repository: one `cat-file --batch-check` (the refs
    on stdin), which reads objects and refs only, under sweep.git's hardening like every call."""
    query = "".join(f"{ref}^{{commit}}\n" for ref in refs).encode()
    try:
        out = run_git(["cat-file", "--batch-check"], repo=path, input=query, timeout=GIT_TIMEOUT_S)
    except GitFailed as exc:
        raise (IntakeTransient if exc.timed_out else IntakeFailed)(exc.message) from None
    answers = out.decode(errors="replace").splitlines()
    shas = []
    for ref, answer in zip(refs, answers + [""] * len(refs), strict=False):
        fields = answer.split()
        if len(fields) != 3 or fields[1] != "commit":
            raise IntakeFailed(f"{ref!r} is not a commit in {path}")
        shas.append(fields[0])
    return shas


def private_repo(rdir: Path, fill) -> Path:
    """`rdir/source/repo`: a bare repository sweep creates (no template: no hooks, no attributes; a
    fresh config), filled by `fill(staging)` before it is renamed into place, so a controller
    killed meanwhile leaves a stray staging directory, never a half-filled repository the next
    attempt would trust. Every later git command of the run works on this copy."""
    import shutil
    from sweep.git import init_private_repo
    dest = Path(rdir) / "source" / "repo"
    make_private_dir(dest.parent)
    for stale in [dest, *dest.parent.glob(".repo.clone-*")]:
        if stale.exists():
            shutil.rmtree(stale)
    staging = dest.parent / f".repo.clone-{os.getpid()}"
    try:
        init_private_repo(staging)
    except GitFailed as exc:
        raise IntakeTransient(exc.message) from None
    fill(staging)
    os.rename(staging, dest)
    return dest


def _from_local(rdir: Path, repo: str, base: str, head: str, title: str | None, body: str | None) -> dict:
    path = Path(repo)
    if not (path / ".git").exists() and not (path / "HEAD").exists():
        raise IntakeFailed(f"{repo} is not a git repository")
    base_sha, head_sha = _resolve_in_candidate(path, [base, head])

    def fill(staging: Path) -> None:
        # only the two commits and their trees (depth 1), fetched by upload-pack, which is made to
        # serve untrusted repositories; nothing of the candidate's config comes along
        try:
            fetch_commits(staging, str(path.resolve()), {"refs/sweep/base": base_sha, "refs/sweep/head": head_sha})
        except GitFailed as exc:
            raise (IntakeTransient if exc.timed_out else IntakeFailed)(exc.message) from None
    private = private_repo(rdir, fill)
    if title is None:
        title = _git("log", "-1", "--format=%s", head_sha, cwd=private).strip()
    if body is None:
        body = _git("log", "-1", "--format=%b", head_sha, cwd=private).strip()
    files = changed_files(private, base_sha, head_sha)
    return {"kind": "git", "url": None, "repo": str(private), "base": base_sha, "head": head_sha,
            "base_ref": base, "head_ref": head, "title": title, "body": body, "changed_files": files}


def changed_files(repo: Path, base: str, head: str) -> list[str]:
    """The paths the PR changes: a tree comparison (`diff --raw`), no file content read."""
    try:
        out = run_git(["diff", "--raw", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", base, head, "--"],
                      repo=repo, timeout=GIT_TIMEOUT_S)
    except GitFailed as exc:
        raise (IntakeTransient if exc.timed_out else IntakeFailed)(exc.message) from None
    fields = out.split(b"\0")
    return [f.decode("utf-8", errors="replace") for f in fields[1::2] if f]


class _TokenStaysOnItsHost(urllib.request.HTTPRedirectHandler):
    """Follows redirects, dropping the Authorization header when one leaves the original origin.

    urllib copies every header of a request onto its redirect, whatever the new host; a redirect
    from the API to anywhere else would otherwise hand that host the token.
    """

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


_OPENER = urllib.request.build_opener(_TokenStaysOnItsHost)


def _api_get(settings: GithubSettings, path: str) -> dict | list:
    # The base URL is the operator's (SWEEP_GITHUB_API), never the PR's: a trusted scheme.
    req = urllib.request.Request(settings.api_url + path, headers={  # noqa: S310
        "Accept": "application/vnd.github+json", "User-Agent": "sweep",
        "X-GitHub-Api-Version": "2022-11-28"})
    token = settings.token()
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with _OPENER.open(req, timeout=API_TIMEOUT_S) as resp:  # noqa: S310 - see above
            return orjson.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410, 422):
            raise IntakeFailed(f"GitHub API {path}: HTTP {exc.code}") from None
        raise IntakeTransient(f"GitHub API {path}: HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise IntakeTransient(f"GitHub API {path}: {exc}") from None
    except orjson.JSONDecodeError:
        raise IntakeTransient(f"GitHub API {path}: answer is not JSON") from None


def _from_github(rdir: Path, url: str, settings: GithubSettings) -> dict:
    try:
        owner, repo, number = github_pr(url)
    except ValueError as exc:
        raise IntakeFailed(str(exc)) from None
    pr = _api_get(settings, f"/repos/{owner}/{repo}/pulls/{number}")
    if not isinstance(pr, dict):
        raise IntakeFailed("GitHub API: pull request answer is not an object")
    try:
        base_sha, head_sha = pr["base"]["sha"], pr["head"]["sha"]
        clone_url = pr["base"]["repo"]["clone_url"]
    except (KeyError, TypeError):
        raise IntakeFailed("GitHub API: pull request answer lacks base/head sha or clone_url") from None
    for sha in (base_sha, head_sha):
        if not (isinstance(sha, str) and len(sha) in (40, 64) and all(c in "0123456789abcdef" for c in sha)):
            raise IntakeFailed(f"GitHub API: {sha!r} is not a commit sha")
    if not (isinstance(clone_url, str) and clone_url.startswith(("https://", "http://"))):
        raise IntakeFailed(f"GitHub API: clone_url {clone_url!r} is not an http(s) URL")
    files = _api_get(settings, f"/repos/{owner}/{repo}/pulls/{number}/files?per_page=100")

    def fill(staging: Path) -> None:
        # the branches (for the base) and the PR's head, into sweep's own bare repository
        _git("fetch", "--quiet", "--no-tags", "--no-recurse-submodules", "--end-of-options", clone_url,
             "+refs/heads/*:refs/remotes/origin/*", f"+refs/pull/{number}/head:refs/sweep/pr-head", cwd=staging)
    dest = private_repo(rdir, fill)
    for sha in (base_sha, head_sha):
        _resolve(dest, sha)     # both commits must now be present locally
    return {"kind": "github", "url": url, "repo": str(dest), "base": base_sha, "head": head_sha,
            "base_ref": pr.get("base", {}).get("ref"), "head_ref": pr.get("head", {}).get("ref"),
            "title": pr.get("title") or "", "body": pr.get("body") or "",
            "changed_files": [f["filename"] for f in files if isinstance(f, dict) and isinstance(f.get("filename"), str)]
            if isinstance(files, list) else []}
