"""The plugin registry: lazy by name, unknown names listed, a missing SDK names its extra."""
from __future__ import annotations

import sys

import pytest

from runstate.errors import ConfigError
from sweep.providers import PROVIDERS
from sweep.registry import Plugin, Registry
from sweep.runtimes import RUNTIMES
from sweep.scheduler import SCHEDULERS


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ConfigError) as info:
        RUNTIMES.load("gpt-pilot")
    assert info.value.field == "runtime" and "gpt-pilot" in info.value.message
    assert all(name in info.value.message for name in ("oracle", "nop", "command"))
    with pytest.raises(ConfigError) as info:
        SCHEDULERS.load("pbs")
    assert info.value.field == "scheduler.backend" and "local, pyslurm, slurm" in info.value.message


def test_a_missing_third_party_package_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "sweep_test_plugin_mod.py").write_text("import no_such_sdk_for_sweep_tests\nclass P: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("provider", "provider", {"modal": Plugin("sweep_test_plugin_mod:P", extra="modal")})
    with pytest.raises(ConfigError) as info:
        reg.load("modal")
    assert "no_such_sdk_for_sweep_tests" in info.value.message
    assert info.value.hint == "pip install 'sweep[modal]'"
    sys.modules.pop("sweep_test_plugin_mod", None)


def test_our_own_missing_module_is_a_bug_not_an_extra():
    reg = Registry("provider", "provider", {"gone": Plugin("sweep.providers.no_such_module:X", extra="x")})
    with pytest.raises(ModuleNotFoundError):
        reg.load("gone")


def test_the_registries_load_lazily_and_resolve(tmp_path):
    assert "local" in PROVIDERS and sorted(PROVIDERS) == ["local"]
    assert SCHEDULERS["pyslurm"].extra == "pyslurm"
    assert RUNTIMES.load("nop").__name__ == "NopRuntime"
    assert PROVIDERS.load("local").__name__ == "LocalProvider"
