"""RoleSpec manifests: every invariant refused at load (and its valid counterpart accepted),
errors that name the file and the field, the shipped manifests, `sweep roles check`, and
whether a runtime can honour a spec."""
from __future__ import annotations

import copy
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from roles import (RoleSpec, load_manifest, load_roles_dir, manifest_sha256, scope_matches,
                   shipped_manifests_dir, validate_instance)
from roles.scope import bind_roots, glob_problem
from runstate.errors import ConfigError
from sweep.cli import main as sweep_main
from sweep.runtimes import check_runtime_supports

REPO_ROOT = Path(__file__).resolve().parents[1]


def shipped(name: str) -> dict:
    return tomllib.loads((shipped_manifests_dir() / f"{name}.toml").read_text())


def write_toml(path: Path, data: dict) -> Path:
    """A tiny TOML writer for the shapes manifests use (tables, arrays, strings, numbers, bools)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f'"{k}" = {value(x)}' for k, x in v.items()) + "}"
        raise TypeError(v)
    lines = [f'"{k}" = {value(v)}' for k, v in data.items() if not isinstance(v, dict)]
    for k, v in data.items():
        if isinstance(v, dict):
            lines.append(f'["{k}"]')
            lines += [f'"{kk}" = {value(vv)}' for kk, vv in v.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def refused(tmp_path: Path, data: dict, name: str | None = None) -> ConfigError:
    path = write_toml(tmp_path / f"{name or data.get('name', 'role')}.toml", data)
    with pytest.raises(ConfigError) as info:
        load_manifest(path)
    assert info.value.path == str(path)   # every error names the manifest file
    return info.value


def accepted(tmp_path: Path, data: dict) -> RoleSpec:
    return load_manifest(write_toml(tmp_path / f"{data['name']}.toml", data))


# --- the shipped manifests -------------------------------------------------------------------

def test_shipped_manifests_load_and_are_the_three_roles():
    specs = load_roles_dir(shipped_manifests_dir())
    assert set(specs) == {"author", "reviewer", "solver"}
    assert specs["author"].scope == ["task/**"] and specs["author"].execution.can_execute
    assert specs["solver"].scope == ["repo/**"]
    reviewer = specs["reviewer"]
    assert reviewer.is_judge and reviewer.read_only and not reviewer.execution.can_execute
    assert reviewer.output_schema["properties"]["verdict"]["enum"] == ["accept", "revise", "reject"]
    assert set(reviewer.output_schema["required"]) == {"verdict", "findings", "rationale"}


def test_reviewer_schema_accepts_a_verdict_and_refuses_others():
    schema = load_manifest(shipped_manifests_dir() / "reviewer.toml").output_schema
    good = {"verdict": "revise", "findings": ["the test checks a log line"], "rationale": "fixable"}
    assert validate_instance(good, schema) == []
    assert validate_instance({**good, "verdict": "maybe"}, schema)
    assert validate_instance({"verdict": "accept", "findings": []}, schema)          # no rationale
    assert validate_instance({**good, "score": 3}, schema)                           # extra field
    assert validate_instance({**good, "findings": "one string"}, schema)


def test_manifests_are_package_data_in_pyproject():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert "*.toml" in pyproject["tool"]["setuptools"]["package-data"]["roles"]
    assert shipped_manifests_dir() == REPO_ROOT / "roles"


def test_manifest_sha256_is_the_file_bytes_digest(tmp_path):
    import hashlib
    src = shipped_manifests_dir() / "author.toml"
    assert manifest_sha256(src) == hashlib.sha256(src.read_bytes()).hexdigest()
    copy_path = tmp_path / "author.toml"
    copy_path.write_text(src.read_text() + "\n# edited\n")
    assert manifest_sha256(copy_path) != manifest_sha256(src)


# --- invariants, both directions -------------------------------------------------------------

def test_a_role_with_no_tools_is_refused(tmp_path):
    data = shipped("solver")
    data["tools"] = []
    err = refused(tmp_path, data)
    assert err.field == "tools" and "no tools" in err.message
    data["tools"] = ["Read"]
    assert accepted(tmp_path, data).tools == ["Read"]


@pytest.mark.parametrize("tool", ["Write", "Edit", "MultiEdit", "NotebookEdit", "Bash", "Bash(pytest:*)",
                                  "Task", "apply_patch", "SomeNewTool"])
def test_a_read_only_role_holding_a_mutating_or_unknown_tool_is_refused(tmp_path, tool):
    data = shipped("reviewer")
    data["tools"] = ["Read", tool]
    err = refused(tmp_path, data)
    assert err.field == "tools" and tool in err.message


def test_a_read_only_role_with_only_read_tools_is_accepted_and_an_executing_role_may_write(tmp_path):
    data = shipped("reviewer")
    data["tools"] = ["Read", "Grep", "Glob", "LS", "WebFetch"]
    assert accepted(tmp_path, data).read_only
    solver = shipped("solver")
    solver["tools"] = ["Read", "Write", "Edit", "Bash(pytest:*)"]
    assert accepted(tmp_path, solver).execution.can_execute


def test_a_read_only_role_with_a_write_scope_is_refused(tmp_path):
    data = shipped("author")
    data["execution"]["can_execute"] = False
    data["tools"] = ["Read"]
    err = refused(tmp_path, data)
    assert err.field == "scope" and "can_execute is false" in err.message
    data["scope"] = []
    assert accepted(tmp_path, data).read_only


def test_a_judge_with_a_scope_is_refused_even_if_it_executes(tmp_path):
    data = shipped("reviewer")
    data["execution"]["can_execute"] = True
    data["scope"] = ["notes/**"]
    err = refused(tmp_path, data)
    assert err.field == "scope" and "judge" in err.message
    data["scope"] = []
    spec = accepted(tmp_path, data)          # an executing judge without a scope is fine
    assert spec.is_judge and spec.read_only


@pytest.mark.parametrize("glob", ["/etc/**", "../outside/**", "task/../../x", "task//x", "./task/**",
                                  "task/a**b", "task\\x", "task/[ab]", "task/\nx"])
def test_unsafe_or_unsupported_scope_globs_are_refused(tmp_path, glob):
    data = shipped("author")
    data["scope"] = [glob]
    err = refused(tmp_path, data)
    assert err.field == "scope[0]"


def test_an_output_schema_sweep_cannot_check_is_refused(tmp_path):
    data = shipped("reviewer")
    data["output_schema"] = copy.deepcopy(data["output_schema"])
    data["output_schema"]["properties"]["verdict"]["pattern"] = "^a"
    err = refused(tmp_path, data)
    assert err.field == "output_schema.properties.verdict.pattern"
    data = shipped("reviewer")
    data["output_schema"]["type"] = "array"
    assert refused(tmp_path, data).field == "output_schema.type"


def test_unknown_fields_and_wrong_types_name_the_field(tmp_path):
    data = shipped("author")
    data["scoep"] = ["task/**"]
    err = refused(tmp_path, data)
    assert err.field == "scoep" and "unknown field" in err.message
    data = shipped("author")
    data["budget"]["walltime_s"] = -1
    assert refused(tmp_path, data).field == "budget.walltime_s"
    data = shipped("author")
    data["key_family"] = "google"
    assert refused(tmp_path, data).field == "key_family"
    data = shipped("author")
    del data["execution"]["environment"]
    assert refused(tmp_path, data).field == "execution.environment"


def test_name_must_match_the_file_and_be_boring(tmp_path):
    data = shipped("author")
    err = refused(tmp_path, data, name="writer")
    assert err.field == "name" and "writer.toml" not in err.message and "author.toml" in err.message
    data["name"] = "Bad Name"
    assert refused(tmp_path, data, name="Bad Name").field == "name"


def test_invalid_toml_names_the_file(tmp_path):
    path = tmp_path / "author.toml"
    path.write_text("name = \n")
    with pytest.raises(ConfigError) as info:
        load_manifest(path)
    assert info.value.path == str(path) and "TOML" in info.value.message


def test_constructing_a_spec_in_code_enforces_the_same_invariants():
    data = shipped("reviewer")
    data["scope"] = ["x/**"]
    with pytest.raises(ValueError):
        RoleSpec.model_validate(data)


# --- scopes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path,scope,inside", [
    ("task", ["task/**"], True), ("task/a/b.md", ["task/**"], True), ("taskx/a", ["task/**"], False),
    ("repo/a.py", ["repo/**/*.py"], True), ("repo/x/y/a.py", ["repo/**/*.py"], True),
    ("repo/a.txt", ["repo/**/*.py"], False), ("task/a.md", ["task/*.md"], True),
    ("task/sub/a.md", ["task/*.md"], False), ("anything/at/all", ["**"], True), ("notes.md", ["notes.md"], True),
    ("notes.mdx", ["notes.md"], False), ("a", [], False),
])
def test_scope_globs_match_whole_segments(path, scope, inside):
    assert scope_matches(path, scope) is inside


def test_bind_roots_are_the_literal_prefixes_collapsed():
    assert bind_roots(["task/**", "task/sub/*.md", "repo/**/*.py"]) == ["repo", "task"]
    assert bind_roots(["**/*.py", "task/**"]) == [""]
    assert bind_roots([]) == []
    assert glob_problem("task/**") is None


# --- runtimes honouring a spec -----------------------------------------------------------------

def test_oracle_plays_only_the_three_roles(tmp_path):
    data = shipped("reviewer")
    data["name"] = "critic"
    spec = accepted(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        check_runtime_supports(spec, "oracle")
    assert info.value.field == "name" and info.value.path == str(tmp_path / "critic.toml")
    for name in ("author", "reviewer", "solver"):
        check_runtime_supports(load_manifest(shipped_manifests_dir() / f"{name}.toml"), "oracle")
        check_runtime_supports(load_manifest(shipped_manifests_dir() / f"{name}.toml"), "nop")


def test_command_runtime_must_be_told_the_tools_of_a_restricted_role():
    reviewer = load_manifest(shipped_manifests_dir() / "reviewer.toml")
    argv = ["agent", "--prompt", "{prompt_file}"]
    with pytest.raises(ConfigError) as info:
        check_runtime_supports(reviewer, "command", {"argv": argv})
    assert info.value.field == "tools" and "{tools}" in (info.value.hint or "")
    check_runtime_supports(reviewer, "command", {"argv": argv + ["--tools", "{tools}", "--max-turns={max_turns}",
                                                                 "--budget", "{cost_cap_usd}"]})


def test_command_runtime_needs_placeholders_for_budget_caps_but_not_for_a_shell_role(tmp_path):
    data = shipped("solver")
    spec = accepted(tmp_path, data)          # holds Bash: no tool restriction to honour
    with pytest.raises(ConfigError) as info:
        check_runtime_supports(spec, "command", {"argv": ["agent"]})
    assert info.value.field == "budget.max_turns"
    with pytest.raises(ConfigError) as info:
        check_runtime_supports(spec, "command", {"argv": ["agent", "{max_turns}"]})
    assert info.value.field == "budget.cost_cap_usd"
    check_runtime_supports(spec, "command", {"argv": ["agent", "{max_turns}", "{cost_cap_usd}"]})
    del data["budget"]["max_turns"], data["budget"]["cost_cap_usd"]
    check_runtime_supports(accepted(tmp_path, data), "command", {"argv": ["agent"]})


def test_an_unknown_runtime_is_a_config_error():
    spec = load_manifest(shipped_manifests_dir() / "author.toml")
    with pytest.raises(ConfigError) as info:
        check_runtime_supports(spec, "no-such-agent")
    assert info.value.field == "runtime"


# --- sweep roles check -------------------------------------------------------------------------

def test_roles_check_prints_a_line_per_manifest_and_the_next_command(tmp_path, capsys):
    for name in ("author", "reviewer", "solver"):
        (tmp_path / f"{name}.toml").write_bytes((shipped_manifests_dir() / f"{name}.toml").read_bytes())
    assert sweep_main(["roles", "check", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:3]] == ["ok", "ok", "ok"]
    assert "Next: sweep init" in out[-1]


def test_roles_check_fails_naming_file_and_field_and_says_what_to_run(tmp_path, capsys):
    (tmp_path / "author.toml").write_bytes((shipped_manifests_dir() / "author.toml").read_bytes())
    data = shipped("reviewer")
    data["scope"] = ["task/**"]
    write_toml(tmp_path / "reviewer.toml", data)
    assert sweep_main(["roles", "check", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("ok") and "author.toml" in lines[0]
    assert lines[1].startswith("error") and f"{tmp_path / 'reviewer.toml'}: scope:" in lines[1]
    assert f"sweep roles check {tmp_path}" in captured.err


def test_roles_check_with_a_runtime_checks_capabilities(capsys):
    assert sweep_main(["roles", "check", str(shipped_manifests_dir()), "--runtime", "command"]) == 2
    out = capsys.readouterr().out
    assert "reviewer.toml: tools:" in out and "author.toml: budget.max_turns:" in out
    assert sweep_main(["roles", "check", "--runtime", "oracle"]) == 0


def test_roles_command_stays_light_at_import():
    code = ("import sys, sweep.cli.roles_cmd; "
            "heavy = [m for m in sys.modules if m.startswith(('sweep.runtimes', 'sweep.providers', "
            "'sweep.harbor', 'modal', 'daytona', 'pyslurm'))]; print(heavy); assert not heavy")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
