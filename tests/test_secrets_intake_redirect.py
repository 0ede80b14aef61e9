"""GitHub intake never forwards its token across a redirect to another host.

The API URL the controller is given points at a small redirecting server (127.0.0.1, its own
port: another origin). It first redirects within itself (same origin: the token must stay, or a
renamed repository on GitHub would lose its authorisation), then to tests/fakes/github.py on a
second port, which records every header it receives. The token comes from the plan's
`[secrets] github` file; the campaign lives outside /tmp.
"""
from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runstate import run_dir
from sweep.harbor.samples import make_pr_repo
from tests.campaigns import sweep, tick_until_done, write_plan
from tests.fakes.github import FakeGitHub, make_bare_pull_repo
from tests.fakes.runs import local_plan, record

REPO = Path(__file__).resolve().parents[1]


class Redirector:
    """/same/<path> -> 301 /hop/<path> (same origin) -> 307 <target>/<path> (another origin)."""

    def __init__(self, target: str) -> None:
        self.seen: list[tuple[str, str | None]] = []        # (path, Authorization header)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.seen.append((self.path, self.headers.get("Authorization")))
                if self.path.startswith("/same/"):
                    location = "/hop/" + self.path[len("/same/"):]
                    code = 301
                elif self.path.startswith("/hop/"):
                    location = target + "/" + self.path[len("/hop/"):]
                    code = 307
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(code)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "Redirector":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scratch():
    base = REPO / ".scratch"
    base.mkdir(exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="secrets-redirect-", dir=base))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_the_token_is_dropped_when_a_redirect_leaves_the_api_host(scratch):
    src = make_pr_repo(scratch / "repos", "verified", name="mathx")
    bare = make_bare_pull_repo(Path(src["repo"]), scratch / "served" / "mathx.git", base=src["base"])
    token = "ghp_fake" + secrets.token_hex(16)
    token_file = scratch / "keys" / "github.token"
    token_file.parent.mkdir()
    token_file.write_text(token + "\n")
    os.chmod(token_file, 0o600)
    plan = local_plan([{"url": "https://github.com/acme/mathx/pull/7"}],
                      secrets={"github": {"file": str(token_file)}})
    d = scratch / "camp"
    with FakeGitHub() as gh, Redirector(gh.base_url) as hop:
        gh.add_pull("acme", "mathx", 7, bare_repo=bare, base=src["base"], head=src["head"],
                    title=src["title"], body=src["body"], files=["mathx.py", "tests/test_mathx.py"])
        env = {"SWEEP_GITHUB_API": hop.url + "/same/api"}
        sweep("init", str(write_plan(scratch / "plan.json", plan)), "--campaign", str(d), env=env)
        tick_until_done(d, env=env, timeout=420)

    rec = record(d, "acme-mathx-7")
    assert rec.outcome.value == "verified", (rec.reason, rec.last_error)     # the redirects were followed
    # on the API's own origin the token went along (both hops) ...
    assert [p.split("/")[1] for p, _ in hop.seen[:2]] == ["same", "hop"]
    assert all(auth == f"Bearer {token}" for _, auth in hop.seen), hop.seen
    # ... and the other host got the requests without it
    api = gh.requests_for("/api/repos/acme/mathx/pulls/7")
    assert api, gh.requests
    assert all("Authorization" not in r.headers and token not in str(r.headers) for r in gh.requests)
    for path in run_dir(d, "acme-mathx-7").rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
