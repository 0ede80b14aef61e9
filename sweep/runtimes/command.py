"""command: any agent CLI, from an argv template. Never through a shell.

    runtime_options = {
        "argv": ["my-agent", "--prompt", "{prompt_file}", "--tools", "{tools}", "--out", "{output_file}"],
        "network": "api",          # "none" | "api" (default; true = "api", false = "none") | "host"
        "endpoints": ["127.0.0.1:8080", "api.example.com:443"],   # what "api" may reach
        "env": {"MY_AGENT_MODEL": "small"},   # non-secret extras; keys come from `secrets`
        "read_paths": ["/opt/my-agent"],      # extra host paths the CLI must see (abs)
        "protocol": "anthropic",   # optional: the model API the CLI speaks ("anthropic": Messages,
                                   # "openai": Responses / Chat Completions); its requests then go
                                   # through the session's relay (below)
        "base_url": "https://api.anthropic.com",   # the real endpoint (default: the protocol's)
        "prices": {...}, "ca_file": "/etc/my-ca.pem",  # as for claude-code and codex (docs/agents.md)
    }

With `protocol`, the session is relayed like claude-code's and codex's (sweep/runtimes/wire): the
relay holds the key, so the sandbox gets none of the key family's variables and no secret; the CLI
is given the protocol's variables instead (`ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL` naming the
relay, `ANTHROPIC_API_KEY` / `OPENAI_API_KEY` a placeholder) and `{model_base_url}` in its
template; every response's usage is metered at the plan's prices and the session is charged that,
and the relay refuses requests once the session's limit is reached (`max_budget`).

Placeholders are substituted inside each argv element in one pass (a value that itself contains
`{workspace}` is not substituted again); the result is passed to exec as a list, so no value is
ever parsed by a shell. Known placeholders:
  {prompt_file} {instructions_file} {schema_file} {workspace} {output_file}
  {tools} (comma-separated) {max_turns} {cost_cap_usd} {walltime_s} {role}
  {model_base_url} (only with `protocol`: the relay's base URL)
An unknown `{name}` is a configuration error, so a typo cannot reach the agent as a literal.

What it can honour depends on the template, and `capabilities` says so: it can restrict tools only
if the template passes `{tools}`, cap turns only with `{max_turns}`, cap cost only with
`{cost_cap_usd}`. The CLI is then trusted to apply them; the sandbox and the audit are what
actually bound it. A judge's verdict is read from `{output_file}` (written in place: the path
is an inherited descriptor, not a writable mount) or else from the last JSON-object line of stdout.
Turns, cost and session id come from an optional usage line: if the CLI prints a JSON object
`{"sweep_usage": {"cost_usd": 0.12, "turns": 7, "session_id": "abc"}}` on a line of its own on
stdout (the last such line counts), those figures are recorded; otherwise they are None and the
controller charges the session its whole reservation.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from runstate.errors import ConfigError
from sweep.runtimes.base import Invocation, Parsed, RuntimeCapabilities, SessionFiles, SessionRequest
from sweep.runtimes.classify import classify_text
from sweep.runtimes.facts import RuntimeFacts

PLACEHOLDERS = ("prompt_file", "instructions_file", "schema_file", "workspace", "output_file",
                "tools", "max_turns", "cost_cap_usd", "walltime_s", "role", "model_base_url")
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_OPTION_KEYS = {"argv", "network", "endpoints", "env", "read_paths", "protocol", "base_url", "prices", "ca_file"}
# protocol -> (the real endpoint by default, the variable naming the base URL, the key variable)
WIRE_PROTOCOLS = {"anthropic": ("https://api.anthropic.com", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
                  "openai": ("https://api.openai.com/v1", "OPENAI_BASE_URL", "OPENAI_API_KEY")}
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_ENV = {"PATH", "HOME", "TMPDIR", "LANG", "LD_PRELOAD", "LD_LIBRARY_PATH"}


def _template(options: dict) -> list[str]:
    argv = options.get("argv")
    return argv if isinstance(argv, list) else []


def _uses(options: dict, name: str) -> bool:
    return any(f"{{{name}}}" in element for element in _template(options) if isinstance(element, str))


def substitute(template: list[str], values: dict[str, str]) -> list[str]:
    """Replace `{name}` inside each element, in a single pass per element (no re-substitution)."""
    return [_PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], element) for element in template]


class CommandRuntime:
    name = "command"
    # any CLI: it may spend money (so it needs a reservation), gets the role's key family, reports
    # its cost on a `sweep_usage` line if it can (else it is charged the whole reservation)
    facts = RuntimeFacts(paid=True, host_only=False, protocol_classified=False, key_families=None,
                         cost="reported", grant_hint="pass {{{what}}} in the command's argv template")

    def capabilities(self, options: dict) -> RuntimeCapabilities:
        return RuntimeCapabilities(restricts_tools=_uses(options, "tools"), structured_output=True,
                                   max_turns=_uses(options, "max_turns"),
                                   cost_cap=_uses(options, "cost_cap_usd"),
                                   needs_network=bool(options.get("network", True)))

    def wire_protocol_for(self, options: dict) -> str | None:
        """The protocol the plan says this CLI speaks (its sessions are then relayed), or None."""
        return options.get("protocol")

    def default_endpoint_for(self, options: dict) -> str | None:
        protocol = options.get("protocol")
        return WIRE_PROTOCOLS[protocol][0] if protocol in WIRE_PROTOCOLS else None

    def _check_wire(self, options: dict) -> None:
        from sweep.runtimes.base import check_wire_options
        protocol = options.get("protocol")
        if protocol is None:
            for key in ("base_url", "prices", "ca_file"):
                if key in options:
                    raise ConfigError(f"runtime_options.{key} needs runtime_options.protocol (the model API the "
                                      "CLI speaks, so that its requests go through the metering relay)",
                                      field=f"runtime_options.{key}")
            if _uses(options, "model_base_url"):
                raise ConfigError("{model_base_url} needs runtime_options.protocol", field="runtime_options.argv")
            return
        if protocol not in WIRE_PROTOCOLS:
            raise ConfigError(f"runtime_options.protocol must be one of {sorted(WIRE_PROTOCOLS)}, not {protocol!r}",
                              field="runtime_options.protocol")
        if options.get("network", "api") not in ("api", True):
            raise ConfigError("a CLI with a protocol reaches its model through the relay: runtime_options.network "
                              "must be \"api\"", field="runtime_options.network")
        base_url = options.get("base_url")
        if base_url is not None and not (isinstance(base_url, str) and re.match(r"^https?://[^\s/]+", base_url)):
            raise ConfigError(f"runtime_options.base_url {base_url!r} is not an http(s) URL",
                              field="runtime_options.base_url")
        check_wire_options(options)

    def check_options(self, options: dict) -> None:
        unknown = set(options) - _OPTION_KEYS
        if unknown:
            raise ConfigError(f"unknown command runtime option(s) {sorted(unknown)}; known: {sorted(_OPTION_KEYS)}",
                              field="runtime_options")
        argv = options.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv) or not argv[0]:
            raise ConfigError("runtime_options.argv must be a non-empty list of strings (the CLI and its arguments)",
                              field="runtime_options.argv")
        for element in argv:
            for name in _PLACEHOLDER_RE.findall(element):
                if name not in PLACEHOLDERS:
                    raise ConfigError(f"unknown placeholder {{{name}}} in argv; known: "
                                      + ", ".join("{" + p + "}" for p in PLACEHOLDERS),
                                      field="runtime_options.argv")
        if "{" in argv[0]:
            raise ConfigError("the program (argv[0]) must be literal, not a placeholder", field="runtime_options.argv")
        if "network" in options and not (isinstance(options["network"], bool)
                                         or options["network"] in ("none", "api", "host")):
            raise ConfigError("runtime_options.network must be \"none\", \"api\" or \"host\" (or true/false)",
                              field="runtime_options.network")
        endpoints = options.get("endpoints", [])
        if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
            raise ConfigError("runtime_options.endpoints must be a list of \"HOST:PORT\" strings",
                              field="runtime_options.endpoints")
        env = options.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ConfigError("runtime_options.env must map names to strings", field="runtime_options.env")
        for key in env:
            if not _ENV_NAME_RE.match(key) or key in _RESERVED_ENV:
                raise ConfigError(f"runtime_options.env may not set {key!r}", field="runtime_options.env")
        paths = options.get("read_paths", [])
        if not isinstance(paths, list) or not all(isinstance(p, str) and os.path.isabs(p) for p in paths):
            raise ConfigError("runtime_options.read_paths must be a list of absolute paths",
                              field="runtime_options.read_paths")
        self._check_wire(options)

    def build_invocation(self, req: SessionRequest, files: SessionFiles, output_path: str) -> Invocation:
        options = req.runtime_options
        role = req.role
        if _uses(options, "schema_file") and role.output_schema is None:
            raise ConfigError("{schema_file} is only available to judges (roles with an output_schema)",
                              field="runtime_options.argv")
        # paths as the session sees them (the fixed view when sandboxed: /app, /session/...)
        values = {
            "prompt_file": req.shown(files.prompt),
            "instructions_file": req.shown(files.instructions),
            "schema_file": req.shown(files.output_schema),
            "workspace": req.shown(req.workspace),
            "output_file": output_path,
            "tools": ",".join(role.tools),
            "max_turns": "" if role.budget.max_turns is None else str(role.budget.max_turns),
            "cost_cap_usd": "" if role.budget.cost_cap_usd is None else f"{role.budget.cost_cap_usd:g}",
            "walltime_s": f"{role.budget.walltime_s:g}",
            "role": role.name,
            "model_base_url": req.wire.base_url if req.wire is not None else "",
        }
        env = dict(options.get("env", {}))
        endpoints = list(options.get("endpoints", []))
        if req.wire is not None:
            # the relay holds the key and meters the wire: the CLI gets its address and a placeholder
            _, base_var, key_var = WIRE_PROTOCOLS[options["protocol"]]
            env[base_var] = req.wire.base_url
            env[key_var] = req.wire.placeholder
            if req.wire.endpoint:
                endpoints.append(req.wire.endpoint)
        template = list(options["argv"])
        read_paths = [files.prompt, files.instructions]
        if role.output_schema is not None:
            read_paths.append(files.output_schema)
        # Files named literally in the template (a script under /tmp, say) must be visible in the sandbox.
        read_paths += [Path(a) for a in template if a.startswith("/") and os.path.exists(a)]
        read_paths += [Path(p) for p in options.get("read_paths", [])]
        return Invocation(argv=substitute(template, values), env=env,
                          read_paths=read_paths, network=options.get("network", True),
                          endpoints=endpoints)

    def parse(self, req: SessionRequest, files: SessionFiles, outcome) -> Parsed:
        parsed = self._parse(req, files, outcome)
        usage = read_usage(outcome.stdout_tail)
        if usage:
            parsed.cost_usd = usage.get("cost_usd", parsed.cost_usd)
            parsed.turns = usage.get("turns", parsed.turns)
            parsed.session_id = usage.get("session_id", parsed.session_id)
        return parsed

    def _parse(self, req: SessionRequest, files: SessionFiles, outcome) -> Parsed:
        output = None
        output_problem = None
        if req.role.output_schema is not None:
            output, output_problem = _read_output(files)
        if outcome.rc != 0:
            cls, line = classify_text(outcome.stdout_tail + "\n" + outcome.stderr_tail)
            tail = (outcome.stderr_tail.strip() or outcome.stdout_tail.strip())[-300:]
            return Parsed(ok=False, failure_class=cls, reason="exit_status",
                          evidence=f"{Path(req.runtime_options['argv'][0]).name} exited {outcome.rc}: {line or tail}",
                          output=output)
        if output_problem:
            return Parsed(ok=False, failure_class="failure", reason="bad_output", evidence=output_problem)
        return Parsed(ok=True, output=output, evidence="command exited 0")


def read_usage(stdout: str) -> dict:
    """The last `{"sweep_usage": {...}}` line of stdout, with only well-typed figures kept."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not (line.startswith("{") and "sweep_usage" in line):
            continue
        try:
            usage = json.loads(line).get("sweep_usage")
        except (ValueError, AttributeError):
            continue
        if not isinstance(usage, dict):
            continue
        out: dict = {}
        cost = usage.get("cost_usd")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0:
            out["cost_usd"] = float(cost)
        turns = usage.get("turns")
        if isinstance(turns, int) and not isinstance(turns, bool) and turns >= 0:
            out["turns"] = turns
        sid = usage.get("session_id")
        if isinstance(sid, str) and sid.isprintable() and len(sid) <= 200:
            out["session_id"] = sid
        return out
    return {}


def _read_output(files: SessionFiles) -> tuple[object, str | None]:
    """The judge's output: the output file if written, else the last JSON-object line of stdout."""
    try:
        text = files.output.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    if text:
        try:
            return json.loads(text), None
        except ValueError as exc:
            return None, f"the output file is not JSON: {exc}"
    try:
        lines = files.stdout.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line), None
            except ValueError:
                continue
    return None, None
