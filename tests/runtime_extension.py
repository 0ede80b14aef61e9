"""A third CLI-shaped session runtime, added the way docs/architecture.md says: one module whose
class declares its facts, plus one registry line (`RUNTIMES.register`, done by the test).

It drives tests/fakes/fake_cli.py the way claude-code and codex drive theirs: an argv built from
the role, the prompt on stdin, events on stdout read back as the protocol; nothing in sweep names it.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from runstate.errors import ConfigError
from sweep.runtimes.base import (Invocation, JsonLines, Parsed, RuntimeCapabilities, SessionFiles, SessionRequest,
                                 check_cli_options, endpoint_of, feed_stdout, find_binary)
from sweep.runtimes.facts import AgentCli, RuntimeFacts

PACKAGE = "@example/fake-cli"
PINNED_VERSION = "1.4.2"
DEFAULT_ENDPOINT = "https://fake-cli.example.invalid"
DEFAULTS = {"binary": "fake-cli"}
_OPTION_TYPES: dict[str, type | tuple[type, ...]] = {"base_url": str, "binary": str, "max_retries": int,
                                                     "stall_s": (int, float)}


def install_root(exe: str) -> Path:
    return Path(exe).parent


class FakeCliRuntime:
    name = "fake-cli"
    facts = RuntimeFacts(paid=True, host_only=False, protocol_classified=True, key_families=("anthropic",),
                         default_endpoint=DEFAULT_ENDPOINT, cost="reported",
                         cli=AgentCli(PACKAGE, PINNED_VERSION, ((1, 4, 0), (1, 5, 0)), DEFAULTS["binary"],
                                      find=find_binary, install_root=install_root))

    def capabilities(self, options: dict) -> RuntimeCapabilities:
        return RuntimeCapabilities(restricts_tools=True, structured_output=True, max_turns=True, cost_cap=True,
                                   needs_network=True)

    def check_options(self, options: dict) -> None:
        check_cli_options("fake-cli", options, _OPTION_TYPES, ())

    def build_invocation(self, req: SessionRequest, files: SessionFiles, output_path: str) -> Invocation:
        opts = {**DEFAULTS, **(req.runtime_options or {})}
        exe = find_binary(opts["binary"])
        if exe is None:
            raise ConfigError(f"the fake CLI ({opts['binary']!r}) is not installed", field="runtime_options.binary")
        base_url = opts.get("base_url") or DEFAULT_ENDPOINT
        argv = [exe, "--base-url", base_url, "--output", output_path, "--tools", ",".join(req.role.tools)]
        if req.role.budget.max_turns is not None:
            argv += ["--max-turns", str(req.role.budget.max_turns)]
        return Invocation(argv=argv, stdin_path=files.prompt, network="api", endpoints=[endpoint_of(base_url)],
                          read_paths=[install_root(exe)])

    def parse(self, req: SessionRequest, files: SessionFiles, outcome) -> Parsed:
        stream = JsonLines()
        events: list[dict] = []

        def feed(line: bytes) -> None:
            event = stream.event_of(line)
            if event is not None:
                events.append(event)
        feed_stdout(files, feed)
        if not events:
            return Parsed(ok=False, failure_class="failure", reason="cli_failed", evidence="no event at all")
        last = events[-1]
        if last.get("type") == "error":
            return Parsed(ok=False, failure_class=str(last.get("class") or "failure"), reason="api_unreachable",
                          evidence=str(last.get("message", ""))[:300])
        if last.get("type") != "result":
            return Parsed(ok=False, failure_class="failure", reason="no_result", evidence=json.dumps(last)[:300])
        try:
            output = json.loads(files.output.read_text()) if files.output.exists() else None
        except ValueError:
            output = None
        return Parsed(ok=True, cost_usd=last.get("cost_usd"), turns=last.get("turns"), output=output,
                      evidence="fake-cli result")


class TextClassifiedFakeCli(FakeCliRuntime):
    """The same CLI under a runtime whose facts say its failures are read from its text."""

    name = "fake-cli-text"
    facts = replace(FakeCliRuntime.facts, protocol_classified=False)
