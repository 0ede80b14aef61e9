"""`sweep discover`: find merged pull requests that change both code and tests, as plan candidates.

Reads GitHub's REST API (the same base URL and token sources as intake: `SWEEP_GITHUB_API`,
`--token-file` or `SWEEP_GITHUB_TOKEN_FILE`, else `GITHUB_TOKEN`; the token goes in a header and
never follows a redirect to another host), one page of closed pull requests at a time, newest
first, and for each merged one its changed files. A pull request is kept when it changes at least
one test file and at least one source file and passes the rules (size, paths, languages, a linked
issue). The kept ones are written to a TOML file of `[[candidates]]` tables that a plan can take
as they are.

Crash and resume: after every page the candidates file and then a state file next to it
(`<out>.discover.json`: the repository, the rules, the next page, what was seen and why each
rejected pull request was rejected) are replaced by atomic rename. A second run with the same
repository and rules goes on from the next page; a crash between the two writes repeats one page,
and candidates already in the file are never written twice.

Limits: `X-RateLimit-Remaining: 0` (on any answer) or a 403/429 with `Retry-After` waits for the
reset, at most `max_wait_s` in all; a 5xx or a dropped connection is retried with backoff (1, 2,
4, 8, 16 s). What cannot be waited out ends the command with one line saying how to resume; the
state already written stays valid.
"""
from __future__ import annotations

import fnmatch
import hashlib
import re
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from runstate.atomic import write_atomic
from runstate.errors import ConfigError, SweepError

API_TIMEOUT_S = 30
PER_PAGE = 100
MAX_FILE_PAGES = 30           # GitHub lists at most 3,000 files of a pull request
BACKOFF_S = (1, 2, 4, 8, 16)
STATE_VERSION = 1
MAX_ANSWER_BYTES = 32 << 20   # one page of the API is far below this; a bigger answer is refused

LANGUAGES: dict[str, tuple[str, ...]] = {
    "python": (".py",),
    "go": (".go",),
    "rust": (".rs",),
    "javascript": (".js", ".mjs", ".cjs", ".jsx"),
    "typescript": (".ts", ".tsx", ".mts", ".cts"),
    "java": (".java",),
}
_TEST_DIRS = {"test", "tests", "__tests__", "spec", "specs", "testing", "testdata"}
_TEST_NAME_RE = re.compile(
    r"(^test_.*\.py$|.*_test\.py$|.*_test\.go$|.*\.(test|spec)\.[cm]?[jt]sx?$|.*Tests?\.java$|.*_spec\.rb$)")
_LINKED_ISSUE_RE = re.compile(
    r"\b(close[sd]?|fix(e[sd])?|resolve[sd]?)\s*:?\s+([\w.-]+/[\w.-]+)?#\d+\b", re.IGNORECASE)
_REPO_RE = re.compile(r"^([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)$")


class DiscoverInterrupted(SweepError):
    """The API could not be waited out; what was written so far is resumable."""

    exit_code = 3


@dataclass(frozen=True)
class Rules:
    """Which merged pull requests become candidates (all given rules must hold)."""

    max_files: int | None = None             # changed files, tests included
    max_changed_lines: int | None = None     # additions + deletions
    include: tuple[str, ...] = ()            # globs: some source change must match one
    exclude: tuple[str, ...] = ()            # globs: matching files are left out of every count
    languages: tuple[str, ...] = ()          # some source change must be in one of them
    linked_issue: bool = False               # the body says "fixes #N" (closes, resolves ...)
    base_branch: str | None = None           # merged into this branch only

    def __post_init__(self) -> None:
        unknown = [lang for lang in self.languages if lang not in LANGUAGES]
        if unknown:
            raise ConfigError(f"unknown language {unknown[0]!r}; known: {', '.join(LANGUAGES)}",
                              field="languages")
        for name in ("max_files", "max_changed_lines"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be at least 1 (got {value})", field=name)

    def digest(self) -> str:
        return hashlib.sha256(orjson.dumps(asdict(self), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]

    @classmethod
    def from_toml(cls, path: Path) -> "Rules":
        """Rules from a TOML file: its `[discover]` table, or its top level when it has none."""
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError("the rules file does not exist", path=path) from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read the rules: {exc}", path=path) from None
        table = data.get("discover", data)
        if not isinstance(table, dict):
            raise ConfigError("[discover] must be a table", path=path, field="discover")
        known = {f for f in cls.__dataclass_fields__}
        for key, value in table.items():
            if key not in known:
                raise ConfigError(f"unknown rule {key!r}; known: {', '.join(sorted(known))}",
                                  path=path, field=f"discover.{key}")
            want: tuple[type, ...] = (bool,) if key == "linked_issue" else (
                (int,) if key.startswith("max_") else (list,) if key in ("include", "exclude", "languages")
                else (str,))
            if not isinstance(value, want) or (key.startswith("max_") and isinstance(value, bool)):
                raise ConfigError(f"expected {want[0].__name__}, got {type(value).__name__}",
                                  path=path, field=f"discover.{key}")
            if isinstance(value, list) and not all(isinstance(v, str) for v in value):
                raise ConfigError("expected a list of strings", path=path, field=f"discover.{key}")
        args: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items()}
        try:
            return cls(**args)
        except ConfigError as exc:
            raise ConfigError(exc.message, path=path, field=f"discover.{exc.field}") from None


def is_test_file(path: str) -> bool:
    parts = path.split("/")
    if any(p in _TEST_DIRS for p in parts[:-1]):
        return True
    if "src/test/" in path:              # Maven/Gradle layout
        return True
    return bool(_TEST_NAME_RE.match(parts[-1]))


def language_of(path: str) -> str | None:
    for lang, suffixes in LANGUAGES.items():
        if path.endswith(suffixes):
            return lang
    return None


@dataclass
class Judgement:
    keep: bool
    why: str                               # the rule that rejected it, or "kept"


def judge(pull: dict, files: list[dict], rules: Rules) -> Judgement:
    """Whether a merged pull request (its API object and its files) becomes a candidate."""
    if rules.base_branch and (pull.get("base") or {}).get("ref") != rules.base_branch:
        return Judgement(False, "base_branch")
    names = [f["filename"] for f in files if not any(fnmatch.fnmatch(f["filename"], g) for g in rules.exclude)]
    if rules.max_files is not None and len(names) > rules.max_files:
        return Judgement(False, "max_files")
    if rules.max_changed_lines is not None:
        lines = sum(int(f.get("additions") or 0) + int(f.get("deletions") or 0)
                    for f in files if f["filename"] in names)
        if lines > rules.max_changed_lines:
            return Judgement(False, "max_changed_lines")
    tests = [n for n in names if is_test_file(n)]
    sources = [n for n in names if n not in tests and language_of(n)]
    if not tests:
        return Judgement(False, "no_test_change")
    if not sources:
        return Judgement(False, "no_source_change")
    if rules.include and not any(fnmatch.fnmatch(n, g) for n in sources for g in rules.include):
        return Judgement(False, "include")
    if rules.languages and not any(language_of(n) in rules.languages for n in sources):
        return Judgement(False, "languages")
    if rules.linked_issue and not _LINKED_ISSUE_RE.search(str(pull.get("body") or "")):
        return Judgement(False, "linked_issue")
    return Judgement(True, "kept")


@dataclass
class DiscoverState:
    """What `<out>.discover.json` holds: enough to resume and to say what was seen."""

    repo: str
    rules: str                             # Rules.digest()
    next_page: int = 1
    done: bool = False
    seen: int = 0                          # pull requests looked at
    kept: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    version: int = STATE_VERSION


class GithubClient:
    """GET against GitHub's REST API with its rate limits and 5xx answers handled.

    `sleep` and `clock` are the real ones except in tests that want to see the waits.
    """

    def __init__(self, api_url: str, token: str | None, *, max_wait_s: float = 3600.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 echo: Callable[[str], None] = lambda _line: None) -> None:
        from sweep.controller.intake import _TokenStaysOnItsHost
        self.api_url = api_url.rstrip("/")
        self._token = token
        self._opener = urllib.request.build_opener(_TokenStaysOnItsHost)
        self.max_wait_s = max_wait_s
        self.waited_s = 0.0
        self.requests = 0
        self._sleep, self._clock, self._echo = sleep, clock, echo
        self._not_before = 0.0             # a rate limit seen on a good answer: wait before the next

    def _wait(self, seconds: float, why: str) -> None:
        seconds = max(0.0, seconds)
        if self.waited_s + seconds > self.max_wait_s:
            raise DiscoverInterrupted(f"{why}: would wait {seconds:.0f} s more, over --max-wait "
                                      f"{self.max_wait_s:.0f} s", hint="run the same command again later to resume")
        self._echo(f"  {why}: waiting {seconds:.0f} s")
        self._sleep(seconds)
        self.waited_s += seconds

    def _reset_wait(self, headers: Any) -> float | None:
        """Seconds until the rate limit resets, when the answer says none are left."""
        retry_after = headers.get("Retry-After")
        if retry_after and retry_after.strip().isdigit():
            return float(retry_after.strip())
        if headers.get("X-RateLimit-Remaining", "").strip() == "0":
            reset = headers.get("X-RateLimit-Reset", "").strip()
            if reset.isdigit():
                return max(0.0, float(reset) - self._clock()) + 1.0
            return 60.0
        return None

    def get(self, path: str) -> Any:
        if self._not_before > self._clock():
            self._wait(self._not_before - self._clock(), "rate limit reached")
        tries = 0
        while True:
            self.requests += 1
            req = urllib.request.Request(self.api_url + path, headers={  # noqa: S310 - the operator's base URL
                "Accept": "application/vnd.github+json", "User-Agent": "sweep",
                "X-GitHub-Api-Version": "2022-11-28"})
            if self._token:
                req.add_header("Authorization", f"Bearer {self._token}")
            try:
                with self._opener.open(req, timeout=API_TIMEOUT_S) as resp:  # noqa: S310
                    body = resp.read(MAX_ANSWER_BYTES + 1)
                    wait = self._reset_wait(resp.headers)
                    if wait is not None:
                        self._not_before = self._clock() + wait
                if len(body) > MAX_ANSWER_BYTES:
                    raise SweepError(f"GitHub API {path}: answer larger than {MAX_ANSWER_BYTES} bytes; refused")
                try:
                    return orjson.loads(body)
                except orjson.JSONDecodeError:
                    raise SweepError(f"GitHub API {path}: the answer is not JSON") from None
            except urllib.error.HTTPError as exc:
                wait = self._reset_wait(exc.headers) if exc.code in (403, 429) else None
                if wait is not None:
                    self._wait(wait, f"rate limited (HTTP {exc.code})")
                    continue
                if exc.code == 401:
                    raise ConfigError("GitHub API: HTTP 401 (bad credentials): check the token file",
                                      field="token") from None
                if exc.code in (403, 404):
                    raise ConfigError(f"GitHub API {path}: HTTP {exc.code} (no such repository, or the "
                                      "token cannot read it)", field="repo") from None
                if exc.code < 500:
                    raise SweepError(f"GitHub API {path}: HTTP {exc.code}") from None
                why = f"HTTP {exc.code}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                why = str(getattr(exc, "reason", exc))
            if tries >= len(BACKOFF_S):
                raise DiscoverInterrupted(f"GitHub API {path}: {why} after {tries + 1} tries",
                                          hint="run the same command again later to resume")
            self._wait(BACKOFF_S[tries], f"GitHub API {why}")
            tries += 1


def parse_repo(text: str) -> tuple[str, str]:
    text = text.strip().removeprefix("https://github.com/").rstrip("/")
    m = _REPO_RE.match(text)
    if not m:
        raise ConfigError(f"{text!r} is not a repository (expected OWNER/REPO)", field="repo")
    return m.group(1), m.group(2)


def _pull_files(client: GithubClient, owner: str, repo: str, number: int) -> list[dict] | None:
    """The changed files of one pull request; None when the answer is malformed."""
    out: list[dict] = []
    for page in range(1, MAX_FILE_PAGES + 1):
        items = client.get(f"/repos/{owner}/{repo}/pulls/{number}/files?per_page={PER_PAGE}&page={page}")
        if not isinstance(items, list):
            return None
        for item in items:
            if not (isinstance(item, dict) and isinstance(item.get("filename"), str) and item["filename"]):
                return None
            out.append(item)
        if len(items) < PER_PAGE:
            break
    return out


def state_path(out: Path) -> Path:
    return out.with_name(out.name + ".discover.json")


def _read_state(path: Path, repo: str, rules: Rules) -> DiscoverState | None:
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise SweepError(f"cannot read the discover state: {exc}", path=path,
                         hint="remove it to start over") from None
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        raise SweepError("not a discover state this version of sweep writes", path=path,
                         hint="remove it to start over")
    try:
        state = DiscoverState(**data)
    except TypeError as exc:
        raise SweepError(f"malformed discover state: {exc}", path=path, hint="remove it to start over") from None
    if state.repo != repo or state.rules != rules.digest():
        raise ConfigError(f"the candidates file was discovered from {state.repo} with other rules",
                          path=path, field="rules",
                          hint="use the same repository and rules to resume, or another --out to start anew")
    return state


def read_candidates(out: Path) -> list[dict]:
    """The `[[candidates]]` of an existing output file (a file written by a crashed run included)."""
    try:
        data = tomllib.loads(out.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SweepError(f"cannot read the candidates file: {exc}", path=out) from None
    cands = data.get("candidates", [])
    if not isinstance(cands, list) or not all(isinstance(c, dict) and isinstance(c.get("url"), str) for c in cands):
        raise SweepError("the file's candidates are not url tables", path=out, field="candidates")
    return cands


def _write_candidates(out: Path, repo: str, cands: list[dict]) -> None:
    from sweep.tomlw import dumps_checked
    head = (f"# Candidates found by `sweep discover {repo}` (merged pull requests that change code and tests).\n"
            "# Paste these [[candidates]] tables into a plan, or append the file to one.\n\n")
    write_atomic(out, (head + dumps_checked({"candidates": cands})).encode())


def read_skip_list(path: Path, owner: str, repo: str) -> set[int]:
    """PR numbers to leave out: one per line as a URL, OWNER/REPO#N, #N or N ('#' comments)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read the skip list: {exc.strerror or exc}", path=path) from None
    out: set[int] = set()
    pattern = re.compile(r"^(?:https://github\.com/([\w.-]+)/([\w.-]+)/pull/|([\w.-]+)/([\w.-]+)#|#)?(\d+)/?$")
    for i, raw in enumerate(lines, 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("# ") or line == "#":
            continue
        m = pattern.match(line)
        if not m:
            raise ConfigError(f"line {i}: {line!r} is not a pull request (URL, OWNER/REPO#N or N)", path=path)
        o, r = m.group(1) or m.group(3), m.group(2) or m.group(4)
        if o and (o.lower(), (r or "").lower()) != (owner.lower(), repo.lower()):
            continue                       # another repository's PR: not ours to skip
        out.add(int(m.group(5)))
    return out


def discover(repo_text: str, out: Path, rules: Rules, client: GithubClient, *, skip: Iterable[int] = (),
             limit: int | None = None, max_pages: int | None = None,
             echo: Callable[[str], None] = print) -> DiscoverState:
    """Walk the closed pull requests of a repository, newest first, appending the kept ones to `out`."""
    owner, repo = parse_repo(repo_text)
    name = f"{owner}/{repo}"
    spath = state_path(out)
    state = _read_state(spath, name, rules) or DiscoverState(repo=name, rules=rules.digest())
    cands = read_candidates(out)
    have = {c["url"] for c in cands}
    skipped = set(skip)
    pages = 0
    while not state.done and (limit is None or state.kept < limit) and (max_pages is None or pages < max_pages):
        page = state.next_page
        items = client.get(f"/repos/{owner}/{repo}/pulls?state=closed&sort=created&direction=desc"
                           f"&per_page={PER_PAGE}&page={page}")
        if not isinstance(items, list):
            raise SweepError(f"GitHub API: page {page} of {name}'s pull requests is not a list")
        kept_here = 0
        whole_page = True
        for item in items:
            if limit is not None and state.kept >= limit:
                whole_page = False         # the rest of this page is read again on resume
                break
            number = item.get("number") if isinstance(item, dict) else None
            if not isinstance(number, int) or isinstance(number, bool) or number < 1:
                state.rejected["malformed"] = state.rejected.get("malformed", 0) + 1
                continue
            state.seen += 1
            url = f"https://github.com/{owner}/{repo}/pull/{number}"
            why = None
            if not item.get("merged_at"):
                why = "not_merged"
            elif number in skipped:
                why = "skip_list"
            elif url in have:
                why = "already_listed"
            if why is None:
                files = _pull_files(client, owner, repo, number)
                verdict = judge(item, files, rules) if files is not None else Judgement(False, "malformed")
                why = None if verdict.keep else verdict.why
            if why is not None:
                state.rejected[why] = state.rejected.get(why, 0) + 1
                continue
            title = " ".join(str(item.get("title") or "").split())[:200]
            cands.append({"url": url, **({"title": title} if title else {})})
            have.add(url)
            state.kept += 1
            kept_here += 1
        if whole_page:
            state.next_page = page + 1
            state.done = len(items) < PER_PAGE
        pages += 1
        # the candidates first: a crash before the state is written repeats this page, and the
        # repeat finds its candidates already listed
        _write_candidates(out, name, cands)
        write_atomic(spath, orjson.dumps(asdict(state), option=orjson.OPT_INDENT_2))
        echo(f"page {page}: {len(items)} pull requests, {kept_here} kept ({state.kept} in all)")
    return state
