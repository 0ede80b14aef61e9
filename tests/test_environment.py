"""The plan's `[environment]`: what controllers, sessions and trials see, and nothing more.

Real processes throughout: `sweep init` and `sweep tick` through the CLI, the local provider with
bubblewrap, real toolchain directories made under the test's own folder (outside /usr, so the
sandbox cannot see them unless they are declared).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

from sweep.execution import ExecSpec
from sweep.models.environment import JobEnvironment
from sweep.providers.local import LocalProvider
from tests.campaigns import sweep, write_plan
from tests.fakes.runs import local_plan, wait_until
from tests.gitrepos import make_verified_pr

REPO = Path(__file__).resolve().parents[1]


def _toolchain(root: Path) -> Path:
    """A toolchain outside /usr: bin/greet reads its own share/ file (so the whole prefix must be
    visible, not just the program)."""
    (root / "bin").mkdir(parents=True)
    (root / "share").mkdir()
    (root / "share" / "greeting").write_text("hello from the toolchain\n")
    tool = root / "bin" / "greet"
    tool.write_text('#!/bin/sh\nd=$(dirname "$0")\ncat "$d/../share/greeting"\necho "GREET_STYLE=$GREET_STYLE"\n')
    tool.chmod(0o755)
    return root


def _env(**toolchains) -> JobEnvironment:
    return JobEnvironment.model_validate({"toolchains": toolchains})


def test_the_sandbox_sees_the_declared_toolchain_and_only_the_declared_path(tmp_path, monkeypatch):
    tc = _toolchain(tmp_path / "opt" / "greeter")
    hidden = _toolchain(tmp_path / "opt" / "other")          # on the caller's PATH, not declared
    monkeypatch.setenv("PATH", f"{hidden / 'bin'}:{os.environ['PATH']}")
    declared = _env(greeter={"path": [str(tc / "bin")], "bind": [str(tc)],
                             "variables": {"GREET_STYLE": "loud"}}).resolved(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    provider = LocalProvider(environment=declared.sandbox())
    out = provider.run(ExecSpec(argv=["greet"], cwd=work, timeout_s=30))
    assert out.rc == 0, out.stderr_tail
    assert "hello from the toolchain" in out.stdout_tail and "GREET_STYLE=loud" in out.stdout_tail
    seen = provider.run(ExecSpec(argv=["/bin/sh", "-c", 'echo "$PATH"; ls "$1" 2>&1 || true', "sh", str(hidden)],
                                 cwd=work, timeout_s=30))
    path_line = seen.stdout_tail.splitlines()[0]
    assert path_line == f"{tc / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    assert "No such file" in seen.stdout_tail           # the undeclared toolchain is not in the sandbox
    # without the declaration the same program is nowhere
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    bare = LocalProvider().run(ExecSpec(argv=["greet"], cwd=work, timeout_s=30))
    assert bare.rc is None and bare.launch_error == "command not found: greet"


def test_a_toolchain_bound_only_by_its_bin_directory_misses_the_rest_of_its_prefix(tmp_path):
    tc = _toolchain(tmp_path / "opt" / "greeter")
    declared = _env(greeter={"path": [str(tc / "bin")]}).resolved(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    out = LocalProvider(environment=declared.sandbox()).run(ExecSpec(argv=["greet"], cwd=work, timeout_s=30))
    assert "hello from the toolchain" not in out.stdout_tail and "No such file" in out.stderr_tail


@pytest.mark.parametrize("bind, why", [
    ("~", "home directory"), ("/", "whole host"), ("/home", "home directory"), ("/etc", "credentials"),
    ("/var", "credentials"),
])
def test_init_refuses_a_bind_that_shows_a_home_or_the_hosts_credentials(tmp_path, bind, why):
    src = make_verified_pr(tmp_path / "repos")
    plan = local_plan([{"id": "r1", "repo": src["repo"], "base": src["base"], "head": src["head"]}],
                      environment={"toolchains": {"mine": {"bind": [bind]}}})
    r = sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(tmp_path / "camp"),
              check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "environment.toolchains.mine.bind.0" in r.stderr and why in r.stderr
    assert not (tmp_path / "camp").exists()


def test_init_refuses_a_bind_holding_the_campaign(tmp_path):
    src = make_verified_pr(tmp_path / "repos")
    plan = local_plan([{"id": "r1", "repo": src["repo"], "base": src["base"], "head": src["head"]}],
                      environment={"toolchains": {"mine": {"bind": ["."]}}})
    r = sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(tmp_path / "camp"),
              check=False)
    assert r.returncode == 2 and "campaign directory" in r.stderr, r.stderr


def test_init_freezes_the_declaration_with_absolute_paths(tmp_path):
    tc = _toolchain(tmp_path / "tc")
    src = make_verified_pr(tmp_path / "repos")
    plan = local_plan([{"id": "r1", "repo": src["repo"], "base": src["base"], "head": src["head"],
                        "options": {"test_command": src["test_command"]}}],
                      environment={"inherit": ["HTTPS_PROXY"],
                                   "toolchains": {"greeter": {"path": ["tc/bin"], "bind": ["tc"]},
                                                  "py": {"prefix": str(Path(sys.prefix))}}})
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(tmp_path / "camp"))
    frozen = tomllib.loads((tmp_path / "camp" / "campaign.toml").read_text())
    env = frozen["settings"]["environment"]
    assert env["toolchains"]["greeter"]["path"] == [str(tc / "bin")]
    assert env["toolchains"]["greeter"]["bind"] == [str(tc)]
    assert env["toolchains"]["py"]["variables"]["VIRTUAL_ENV"] == sys.prefix
    assert env["inherit"] == ["HTTPS_PROXY"]
    # the test command's program, resolved in the job environment: the venv's python3 (tc/bin has none)
    assert os.path.realpath(frozen["test_programs"][src["test_command"]]) == \
        os.path.realpath(Path(sys.prefix) / "bin" / "python3")


def test_a_declared_variable_may_not_be_one_sweep_sets(tmp_path):
    src = make_verified_pr(tmp_path / "repos")
    plan = local_plan([{"id": "r1", "repo": src["repo"], "base": src["base"], "head": src["head"]}],
                      environment={"toolchains": {"x": {"variables": {"PATH": "/opt/bin"}}}})
    r = sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(tmp_path / "camp"),
              check=False)
    assert r.returncode == 2 and "environment.toolchains.x.variables" in r.stderr and "PATH" in r.stderr


DUMP_ENV = "import json, os, sys; open(sys.argv[2] + '/job-env.json', 'w').write(json.dumps(dict(os.environ)))"


def test_controllers_get_the_declared_environment_whatever_the_ticks_path(tmp_path):
    """A tick from a shell with a venv active and one from a bare login PATH hand the controller
    the same PATH and variables: the declared ones."""
    tc = _toolchain(tmp_path / "tc")
    src = make_verified_pr(tmp_path / "repos")
    plan = local_plan([{"id": "r1", "repo": src["repo"], "base": src["base"], "head": src["head"]}],
                      environment={"inherit": ["MY_PROXY"],
                                   "toolchains": {"greeter": {"path": [str(tc / "bin")], "bind": [str(tc)],
                                                              "variables": {"GREET_STYLE": "quiet"}}}},
                      tick={"submit_grace_s": 0, "controller_command": [sys.executable, "-c", DUMP_ENV]})
    seen = []
    for n, tick_path in enumerate((f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "/usr/bin:/bin")):
        camp = tmp_path / f"camp{n}"
        sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(camp))
        sweep("tick", "--campaign", str(camp), env={"PATH": tick_path, "MY_PROXY": "http://proxy.invalid:3128"})
        env = json.loads(wait_until("the job's environment", lambda c=camp: _read(c / "job-env.json")))
        seen.append({k: env.get(k) for k in ("PATH", "GREET_STYLE", "MY_PROXY", "SWEEP_CAMPAIGN")})
        assert seen[-1].pop("SWEEP_CAMPAIGN") == str(camp)
    assert seen[0] == seen[1] == {"PATH": f"{tc / 'bin'}:/usr/local/bin:/usr/bin:/bin", "GREET_STYLE": "quiet",
                                  "MY_PROXY": "http://proxy.invalid:3128"}


MODULE_CMD = Path("/usr/lib/x86_64-linux-gnu/modulecmd.tcl")


def _modulefile(root: Path, tc: Path) -> Path:
    """An Environment Modules modulefile `greeter/1.0` that puts the toolchain on PATH."""
    (root / "greeter").mkdir(parents=True)
    (root / "greeter" / "1.0").write_text(f"#%Module1.0\nprepend-path PATH {tc / 'bin'}\n"
                                          "setenv GREET_STYLE loud\n")
    return root


@pytest.mark.skipif(not shutil.which("modulecmd.tcl", path=str(MODULE_CMD.parent)),
                    reason="Environment Modules is not installed (.ci/run installs it)")
def test_module_load_lines_are_frozen_by_init_and_controllers_get_what_they_set(tmp_path):
    """`modules = ["greeter/1.0"]`: init loads it once in a clean login shell and keeps what it
    set; a tick with a bare PATH and no MODULEPATH hands the controller exactly that."""
    tc = _toolchain(tmp_path / "tc")
    mods = _modulefile(tmp_path / "modulefiles", tc)
    src = make_verified_pr(tmp_path / "repos")
    plan = local_plan([{"id": "r1", "repo": src["repo"], "base": src["base"], "head": src["head"]}],
                      environment={"toolchains": {"greeter": {"modules": ["greeter/1.0"]}}},
                      tick={"submit_grace_s": 0, "controller_command": [sys.executable, "-c", DUMP_ENV]})
    camp = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(camp),
          env={"MODULEPATH": str(mods)})
    frozen = tomllib.loads((camp / "campaign.toml").read_text())["settings"]["environment"]["toolchains"]["greeter"]
    assert frozen["modules"] == ["greeter/1.0"] and frozen["path"] == [str(tc / "bin")], frozen
    assert frozen["bind"] == [str(tc)], frozen                     # the module's prefix, not only bin/
    assert frozen["variables"]["GREET_STYLE"] == "loud" and frozen["variables"]["LOADEDMODULES"] == "greeter/1.0"
    assert not any(k in frozen["variables"] for k in ("PATH", "HOME", "SHLVL", "PWD")), frozen["variables"]
    sweep("tick", "--campaign", str(camp), env={"PATH": "/usr/bin:/bin", "MODULEPATH": "/nonexistent"})
    env = json.loads(wait_until("the job's environment", lambda: _read(camp / "job-env.json")))
    assert env["PATH"] == f"{tc / 'bin'}:/usr/local/bin:/usr/bin:/bin" and env["GREET_STYLE"] == "loud", env
    # a module that does not load: init refuses, naming the field and what the module command said
    plan["environment"] = {"toolchains": {"greeter": {"modules": ["greeter/9.9"]}}}
    r = sweep("init", str(write_plan(tmp_path / "plan.json", plan)), "--campaign", str(tmp_path / "bad"),
              env={"MODULEPATH": str(mods)}, check=False)
    assert r.returncode == 2 and "environment.toolchains.greeter.modules" in r.stderr, r.stderr
    assert "module load greeter/9.9" in r.stderr and "greeter/9.9" in r.stderr.split("failed", 1)[1], r.stderr
    assert not (tmp_path / "bad").exists()


def _read(path: Path) -> str | None:
    try:
        return path.read_text() or None
    except FileNotFoundError:
        return None


@pytest.mark.skipif(not shutil.which("javac", path="/usr/bin:/bin"), reason="no JDK installed (.ci/run installs one)")
def test_debians_jdk_compiles_and_runs_in_the_sandbox(tmp_path):
    """Debian's JDK links conf/security/java.security into /etc/java-*-openjdk: without that
    directory in the sandbox javac dies with 'Error loading java.security file'."""
    work = tmp_path / "java"
    work.mkdir()
    (work / "Hello.java").write_text('class Hello { public static void main(String[] a) { System.out.println("hi " + '
                                     'java.security.Security.getProperty("securerandom.source")); } }\n')
    provider = LocalProvider()
    built = provider.run(ExecSpec(argv=["javac", "Hello.java"], cwd=work, timeout_s=120, write_paths=(work,)))
    assert built.rc == 0, built.stderr_tail[-800:]
    ran = provider.run(ExecSpec(argv=["java", "-cp", str(work), "Hello"], cwd=work, timeout_s=120))
    assert ran.rc == 0 and "hi file:" in ran.stdout_tail, ran.stderr_tail[-800:]
