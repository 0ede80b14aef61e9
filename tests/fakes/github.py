"""A FAKE GitHub for tests: the two REST endpoints sweep's intake reads, and git over dumb HTTP.

    with FakeGitHub() as gh:
        gh.add_pull("owner", "repo", 7, bare_repo=..., base=sha, head=sha, title=..., body=...,
                    files=["mathx.py", "tests/test_mathx.py"])
        env = {"SWEEP_GITHUB_API": gh.api_url, ...}

- `GET /repos/{o}/{r}/pulls/{n}` answers a GitHub-shaped pull request (base/head sha and ref,
  base.repo.clone_url pointing back at this server, title, body); `.../pulls/{n}/files` the
  changed files. Unknown pulls answer 404 with GitHub's error body.
- `GET /git/{o}/{r}.git/...` serves the files of a real bare repository, which is what git's
  "dumb" HTTP protocol reads (info/refs, objects/..., packs): `add_pull` writes
  `refs/pull/{n}/head` into it and runs `git update-server-info`, so the controller's real
  `git clone` and `git fetch origin refs/pull/{n}/head` work against it.
- Every request is recorded (method, path, headers, when it started), so a test can check what
  reached the server, e.g. the token as a Bearer header.
- `delay_s` makes the pulls endpoint answer slowly (a slow intake); `release()` ends every wait.
- For `sweep discover`: `list_pull(...)` adds a pull request to the repository's listing
  (`GET /repos/{o}/{r}/pulls?state=closed&page=N&per_page=M`, newest first, with GitHub's `Link`
  header, and its `/files` paged the same way); `listing_extra` holds raw items (malformed ones);
  `fail_next(fragment, status, times)` answers the next matching requests with that status;
  `rate_limit(after=N, reset_in_s=S)` answers 403 with `X-RateLimit-Remaining: 0` and a reset time
  once N requests have been served, until the reset time has passed.

It listens on 127.0.0.1 on a free port, in a thread of the test process; the controller under test
is a separate process that reaches it over real HTTP.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    started: float


@dataclass
class Pull:
    owner: str
    repo: str
    number: int
    bare_repo: Path
    base: str
    head: str
    title: str
    body: str
    files: list = field(default_factory=list)     # names, or raw entries (dicts) as GitHub might send


class FakeGitHub:
    def __init__(self) -> None:
        self.pulls: dict[tuple[str, str, int], Pull] = {}
        self.repos: dict[tuple[str, str], Path] = {}
        self.requests: list[Request] = []
        self.delay_s = 0.0
        self.listed: dict[tuple[str, str], list[dict]] = {}       # raw pull objects, newest first
        self.listed_files: dict[tuple[str, str, int], list] = {}
        self._failures: list[list] = []                            # [fragment, status, times left]
        self._rate_after: int | None = None
        self._rate_reset = 0.0
        self._rate_window = 0.0
        self.rate_limited = 0                                      # 403s answered for the limit
        self._released = threading.Event()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):   # keep pytest output clean
                pass

            def do_GET(self):
                fake._record(self)
                fake._answer(self)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass    # a client killed mid-answer (the tests kill controllers) is not news

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="fake-github")

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def api_url(self) -> str:
        return self.base_url + "/api"

    def __enter__(self) -> "FakeGitHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        """End every delayed answer now (and answer later requests without delay)."""
        self.delay_s = 0.0
        self._released.set()

    # -- content ------------------------------------------------------------------------------
    def add_pull(self, owner: str, repo: str, number: int, *, bare_repo: Path, base: str, head: str,
                 title: str, body: str, files: list[str]) -> Pull:
        bare_repo = Path(bare_repo)
        subprocess.run(["git", "-C", str(bare_repo), "update-ref", f"refs/pull/{number}/head", head],
                       check=True, capture_output=True)
        subprocess.run(["git", "-C", str(bare_repo), "update-server-info"], check=True, capture_output=True)
        pull = Pull(owner, repo, number, bare_repo, base, head, title, body, list(files))
        self.pulls[(owner.lower(), repo.lower(), number)] = pull
        self.repos[(owner.lower(), repo.lower())] = bare_repo
        return pull

    def list_pull(self, owner: str, repo: str, number: int, *, files: list, merged: bool = True,
                  title: str = "", body: str = "", base_ref: str = "main") -> dict:
        """A pull request in the repository's listing (no git objects: for discovery only).
        `files` are names, (name, additions, deletions) or raw entries (dicts)."""
        item = {"number": number, "state": "closed", "title": title or f"PR {number}", "body": body,
                "merged_at": "2026-11-01T00:00:00Z" if merged else None, "base": {"ref": base_ref},
                "html_url": f"https://github.com/{owner}/{repo}/pull/{number}"}
        key = (owner.lower(), repo.lower())
        self.listed.setdefault(key, []).append(item)
        self.listed[key].sort(key=lambda p: -p["number"] if isinstance(p.get("number"), int) else 0)
        entries = []
        for f in files:
            if isinstance(f, tuple):
                entries.append({"filename": f[0], "status": "modified", "additions": f[1], "deletions": f[2]})
            elif isinstance(f, str):
                entries.append({"filename": f, "status": "modified", "additions": 1, "deletions": 1})
            else:
                entries.append(f)
        self.listed_files[(key[0], key[1], number)] = entries
        return item

    def fail_next(self, fragment: str, status: int, times: int = 1) -> None:
        with self._lock:
            self._failures.append([fragment, status, times])

    def rate_limit(self, *, after: int, reset_in_s: float) -> None:
        """Once `after` more requests have been served, answer 403 (limit reached) for `reset_in_s`
        seconds from the first refused request (0: lift the limit now)."""
        with self._lock:
            self._rate_after = len(self.requests) + after if reset_in_s > 0 else None
            self._rate_window = reset_in_s
            self._rate_reset = 0.0

    def clone_url(self, owner: str, repo: str) -> str:
        return f"{self.base_url}/git/{owner}/{repo}.git"

    def requests_for(self, fragment: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if fragment in r.path]

    # -- serving ------------------------------------------------------------------------------
    def _record(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.requests.append(Request(handler.command, handler.path, dict(handler.headers.items()),
                                         time.time()))

    def _send(self, handler, status: int, body: bytes, content_type: str = "application/json",
              headers: dict | None = None) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _json(self, handler, status: int, data, headers: dict | None = None) -> None:
        self._send(handler, status, json.dumps(data).encode(), headers=headers)

    def _injected(self, handler) -> bool:
        """Answer with an injected failure or the rate limit, if one applies."""
        with self._lock:
            for failure in self._failures:
                if failure[0] in handler.path and failure[2] > 0:
                    failure[2] -= 1
                    status = failure[1]
                    break
            else:
                status = 0
            limited = self._rate_after is not None and len(self.requests) > self._rate_after
            if limited and not self._rate_reset:
                self._rate_reset = time.time() + self._rate_window
            limited = limited and time.time() < self._rate_reset
        if status:
            self._json(handler, status, {"message": "Server Error"})
            return True
        if limited:
            self.rate_limited += 1
            self._json(handler, 403, {"message": "API rate limit exceeded"},
                       headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(self._rate_reset) + 1)})
            return True
        return False

    def _page(self, handler, items: list) -> None:
        query = dict(p.split("=", 1) for p in urlsplit(handler.path).query.split("&") if "=" in p)
        if "page" not in query:
            return self._json(handler, 200, items)
        per_page, page = int(query.get("per_page", "30")), int(query["page"])
        chunk = items[(page - 1) * per_page:page * per_page]
        headers = {"X-RateLimit-Remaining": "4999"}
        if page * per_page < len(items):
            base = urlsplit(handler.path)._replace(query="").geturl()
            headers["Link"] = f'<{self.base_url}{base}?per_page={per_page}&page={page + 1}>; rel="next"'
        self._json(handler, 200, chunk, headers=headers)

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        path = unquote(urlsplit(handler.path).path)
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["api"] and self._injected(handler):
            return None
        if parts[:2] == ["api", "repos"] and len(parts) == 5 and parts[4] == "pulls":
            key = (parts[2].lower(), parts[3].lower())
            if key not in self.listed:
                return self._json(handler, 404, {"message": "Not Found"})
            return self._page(handler, self.listed[key])
        if (parts[:2] == ["api", "repos"] and len(parts) == 7 and parts[6] == "files" and parts[5].isdigit()
                and (parts[2].lower(), parts[3].lower(), int(parts[5])) in self.listed_files):
            return self._page(handler, self.listed_files[(parts[2].lower(), parts[3].lower(), int(parts[5]))])
        if parts[:1] == ["git"] and len(parts) >= 4:
            return self._git_file(handler, parts[1], parts[2].removesuffix(".git"), parts[3:])
        if parts[:2] == ["api", "repos"] and len(parts) in (6, 7) and parts[4] == "pulls":
            owner, repo, number = parts[2], parts[3], parts[5]
            if self.delay_s > 0:
                self._released.wait(self.delay_s)
            pull = self.pulls.get((owner.lower(), repo.lower(), int(number))) if number.isdigit() else None
            if pull is None:
                return self._json(handler, 404, {"message": "Not Found",
                                                 "documentation_url": "https://docs.github.com/rest"})
            if len(parts) == 7 and parts[6] == "files":
                return self._json(handler, 200, [f if isinstance(f, dict) else {"filename": f, "status": "modified"}
                                                 for f in pull.files])   # a dict: an entry as given
            if len(parts) == 6:
                return self._json(handler, 200, self._pull_json(pull))
        self._json(handler, 404, {"message": "Not Found"})

    def _pull_json(self, pull: Pull) -> dict:
        repo_json = {"full_name": f"{pull.owner}/{pull.repo}", "clone_url": self.clone_url(pull.owner, pull.repo)}
        return {"number": pull.number, "state": "closed", "merged": True, "title": pull.title, "body": pull.body,
                "base": {"ref": "main", "sha": pull.base, "repo": repo_json},
                "head": {"ref": f"fix-{pull.number}", "sha": pull.head, "repo": repo_json},
                "html_url": f"https://github.com/{pull.owner}/{pull.repo}/pull/{pull.number}"}

    def _git_file(self, handler, owner: str, repo: str, rel: list[str]) -> None:
        root = self.repos.get((owner.lower(), repo.lower()))
        if root is None or any(p in ("..", ".") for p in rel):
            return self._send(handler, 404, b"not found\n", "text/plain")
        target = root.joinpath(*rel)
        if not target.is_file():
            return self._send(handler, 404, b"not found\n", "text/plain")
        self._send(handler, 200, target.read_bytes(), "application/octet-stream")


def make_bare_pull_repo(work_repo: Path, bare: Path, *, base: str) -> Path:
    """A bare copy of `work_repo` whose main branch is `base` (the PR's head is only reachable
    through the refs/pull/N/head ref that `FakeGitHub.add_pull` writes)."""
    subprocess.run(["git", "clone", "--quiet", "--bare", str(work_repo), str(bare)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(bare), "update-ref", "refs/heads/main", base], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True, capture_output=True)
    return bare
