"""The pure parts of evaluation campaigns (sweep/eval/): the plan, the dataset reader, the
assignment manifest and the statistics, the last checked against hand computations."""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from runstate.errors import ConfigError
from sweep.eval import stats
from sweep.eval.dataset import read_dataset
from sweep.eval.manifest import assign, read_manifest
from sweep.eval.plan import EvalPlan, load_eval_plan
from sweep.harbor.digest import harbor_digest

PLAN = """
name = "e1"
dataset = "ds"
repeats = 3
seed = 7

[[arms]]
name = "oracle"
runtime = "command"
runtime_options = { argv = ["true"] }

[[arms]]
name = "nop"
runtime = "nop"
budget = { wall_s = 60, max_turns = 5 }
"""


def _write(tmp_path: Path, text: str, name: str = "eval.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_plan_reads_arms_repeats_seed(tmp_path):
    plan = load_eval_plan(_write(tmp_path, PLAN))
    assert [a.name for a in plan.arms] == ["oracle", "nop"]
    assert plan.repeats == 3 and plan.seed == 7
    assert plan.arms[0].runtime_options == {"argv": ["true"]}
    assert plan.arms[1].budget.wall_s == 60 and plan.arms[1].budget.max_turns == 5


@pytest.mark.parametrize("text, field", [
    (PLAN.replace('name = "nop"\n', 'name = "nop"\nmodle = "x"\n'), "arms.1.modle"),
    (PLAN.replace("seed = 7", "seed = 7\nrepeat = 2"), "repeat"),
    (PLAN.replace("max_turns = 5", "max_turn = 5"), "arms.1.budget.max_turn"),
])
def test_unknown_fields_are_errors_naming_the_field(tmp_path, text, field):
    with pytest.raises(ConfigError) as err:
        load_eval_plan(_write(tmp_path, text))
    assert err.value.field == field and "unknown field" in err.value.message
    assert err.value.path == str(tmp_path / "eval.toml")


@pytest.mark.parametrize("text, field, words", [
    (PLAN.replace('runtime = "nop"', 'runtime = "gpt-agent"'), "arms.1.runtime", "unknown runtime"),
    (PLAN.replace('name = "nop"', 'name = "oracle"'), "(top level)", "unique"),
    (PLAN.replace("repeats = 3", "repeats = 0"), "repeats", "greater than or equal to 1"),
    (PLAN.replace("seed = 7\n", ""), "seed", "required"),
    (PLAN.replace('name = "nop"\n', 'name = "nop"\ngate_feedback = 21\n'), "arms.1.gate_feedback",
     "less than or equal to 20"),
])
def test_bad_values_name_field_and_expectation(tmp_path, text, field, words):
    with pytest.raises(ConfigError) as err:
        load_eval_plan(_write(tmp_path, text))
    assert err.value.field == field and words in err.value.message


FAULTS = PLAN + """
[[faults]]
cells = ["c00001"]
after_tool_calls = 2
"""


@pytest.mark.parametrize("text, field, words", [
    (FAULTS.replace('cells = ["c00001"]', 'cell = ["c00001"]'), "faults.0.cell", "unknown field"),
    (FAULTS.replace("after_tool_calls = 2", "after_tool_calls = 0"), "faults.0.after_tool_calls",
     "greater than or equal to 1"),
    (FAULTS.replace('cells = ["c00001"]\n', ""), "faults.0", "give cells, arms or repeats"),
])
def test_a_faults_unknown_field_or_bad_value_is_refused(tmp_path, text, field, words):
    with pytest.raises(ConfigError) as err:
        load_eval_plan(_write(tmp_path, text))
    assert err.value.field == field and words in err.value.message, err.value.message


def test_faults_are_checked_against_the_manifest():
    """A fault names cells, arms and repeats the manifest has, selects a cell whose arm's runtime
    counts tool calls (claude-code, codex; not command or nop), and no cell twice."""
    from sweep.eval.plan import check_faults, fault_for
    base = {"name": "e", "dataset": "ds", "repeats": 2, "seed": 1,
            "arms": [{"name": "claude", "runtime": "claude-code"}, {"name": "nop", "runtime": "nop"}]}
    cells = assign(TASKS[:2], ["claude", "nop"], 2, seed=1).cells

    def refused(faults: list[dict]) -> ConfigError:
        with pytest.raises(ConfigError) as err:
            check_faults(EvalPlan.model_validate({**base, "faults": faults}), cells)
        return err.value
    err = refused([{"cells": ["c00099"], "after_tool_calls": 1}])
    assert err.field == "faults.0.cells" and "c00099" in err.message
    assert refused([{"arms": ["clod"], "after_tool_calls": 1}]).field == "faults.0.arms"
    assert refused([{"repeats": [2], "after_tool_calls": 1}]).field == "faults.0.repeats"
    err = refused([{"arms": ["nop"], "after_tool_calls": 1}])
    assert err.field == "faults.0" and "reports no tool calls" in err.message
    err = refused([{"arms": ["claude"], "repeats": [0], "after_tool_calls": 1},
                   {"arms": ["claude"], "after_tool_calls": 3}])
    assert err.field == "faults.1" and "selected by faults 0 and 1" in err.message
    plan = EvalPlan.model_validate({**base, "faults": [{"arms": ["claude"], "repeats": [1], "after_tool_calls": 4}]})
    check_faults(plan, cells)
    assert sorted(c.cell_id for c in cells if fault_for(plan, c) == 4) == \
        sorted(c.cell_id for c in cells if c.arm == "claude" and c.repeat == 1)
    assert len([c for c in cells if fault_for(plan, c)]) == 2


def _task(root: Path, name: str, body: str) -> Path:
    t = root / name
    (t / "tests").mkdir(parents=True)
    (t / "task.toml").write_text('version = "1.0"\n')
    (t / "instruction.md").write_text(body)
    (t / "tests" / "test.sh").write_text("exit 0\n")
    return t


def test_dataset_tasks_digests_and_a_changed_task_is_refused(tmp_path):
    ds = tmp_path / "ds"
    a, b = _task(ds, "beta", "b"), _task(ds, "alpha", "a")
    (ds / "notes").mkdir()                           # no task.toml: not a task
    tasks = read_dataset(ds)
    assert [(t.task_id, t.digest) for t in tasks] == [("alpha", harbor_digest(b)), ("beta", harbor_digest(a))]
    (ds / "dataset.toml").write_text(f'[[tasks]]\nname = "x/alpha"\ndigest = "{harbor_digest(b)}"\n'
                                     '[[tasks]]\nname = "x/beta"\ndigest = "sha256:00"\n')
    with pytest.raises(ConfigError) as err:
        read_dataset(ds)
    assert "task beta" in err.value.message and "sha256:00" in err.value.message
    with pytest.raises(ConfigError, match="no task"):
        read_dataset(tmp_path / "ds" / "notes")


TASKS = [(f"t{i}", f"sha256:{i:064x}") for i in range(4)]
ARMS = ["oracle", "nop", "third"]


def test_manifest_has_every_cell_once_and_follows_the_documented_shuffle():
    m = assign(TASKS, ARMS, 3, seed=11)
    assert len(m.cells) == 4 * 3 * 3
    assert Counter((c.task_id, c.arm, c.repeat) for c in m.cells) == \
        Counter((t, a, r) for t, _ in TASKS for a in ARMS for r in range(3))
    assert [c.position for c in m.cells] == list(range(36))
    assert [c.cell_id for c in m.cells[:2]] == ["c00000", "c00001"]
    # the documented order, derived here from random.Random itself
    rng = random.Random(11)
    order = sorted(TASKS)
    rng.shuffle(order)
    blocks = []
    for _ in order:
        pairs = [(a, r) for a in ARMS for r in range(3)]
        rng.shuffle(pairs)
        blocks.append(pairs)
    expected = [(order[b][0], *blocks[b][j], b) for j in range(9) for b in range(4)]
    assert [(c.task_id, c.arm, c.repeat, c.block) for c in m.cells] == expected
    assert all(c.digest == dict(TASKS)[c.task_id] for c in m.cells)
    # interleaved: each run of B positions holds one cell of every block
    for j in range(9):
        assert sorted(c.block for c in m.cells[j * 4:(j + 1) * 4]) == [0, 1, 2, 3]


def test_manifest_is_deterministic_frozen_and_its_sha_checked():
    m = assign(TASKS, ARMS, 3, seed=11)
    assert m.to_bytes() == assign(list(reversed(TASKS)), ARMS, 3, seed=11).to_bytes()   # input order is irrelevant
    assert m.sha256() != assign(TASKS, ARMS, 3, seed=12).sha256()
    assert read_manifest(m.to_bytes(), m.sha256()) == m
    with pytest.raises(ValueError, match="sha256"):
        read_manifest(m.to_bytes().replace(b"oracle", b"oracl3"), m.sha256())
    with pytest.raises(ValueError):
        assign(TASKS, ["a", "a"], 1, seed=1)


def test_no_arm_runs_systematically_earlier():
    """Over many seeds every arm's mean position is the middle of the campaign."""
    means: dict[str, list[float]] = {a: [] for a in ARMS}
    for seed in range(200):
        m = assign(TASKS, ARMS, 2, seed=seed)
        for a in ARMS:
            pos = [c.position for c in m.cells if c.arm == a]
            means[a].append(sum(pos) / len(pos))
    mid = (4 * 3 * 2 - 1) / 2
    for a in ARMS:
        assert abs(sum(means[a]) / 200 - mid) < 0.6, (a, sum(means[a]) / 200)


def test_wilson_by_hand():
    # 7/10: p = .7, z^2 = 3.8415; centre = (.7 + .19207)/1.38415 = .64449;
    # half = 1.96 * sqrt(.021 + .0096036)/1.38415 = .24772 -> (.39677, .89220)
    lo, hi = stats.wilson(7, 10)
    assert lo == pytest.approx(0.39677, abs=1e-4) and hi == pytest.approx(0.89220, abs=1e-4)
    # 0/3: the upper bound is z^2 / (n + z^2) = 3.8415/6.8415
    assert stats.wilson(0, 3) == (0.0, pytest.approx(3.841459 / 6.841459, abs=1e-6))
    assert stats.wilson(3, 3) == (pytest.approx(3 / 6.841459, abs=1e-6), 1.0)
    assert stats.wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        stats.wilson(4, 3)


def test_pass_at_k_by_hand():
    assert stats.pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert stats.pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)          # 1 - C(2,2)/C(3,2)
    assert stats.pass_at_k(5, 2, 2) == pytest.approx(0.7)                # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert stats.pass_at_k(3, 2, 2) == 1.0 and stats.pass_at_k(3, 0, 3) == 0.0
    # mean over tasks: (1/3 + 1 + 0) / 3 at k=1; (2/3 + 1 + 0) / 3 at k=2
    per_task = {"a": [True, False, False], "b": [True, True, True], "c": [False, False, False]}
    assert stats.arm_pass_at_k(per_task, 1) == pytest.approx(4 / 9)
    assert stats.arm_pass_at_k(per_task, 2) == pytest.approx(5 / 9)


def test_mcnemar_by_hand():
    # 6 discordant one way, 1 the other: n = 7, P(X <= 1) = (1 + 7)/128, two-sided .125
    assert stats.mcnemar_p(6, 1) == pytest.approx(0.125)
    assert stats.mcnemar_p(1, 6) == pytest.approx(0.125)
    assert stats.mcnemar_p(0, 0) == 1.0
    assert stats.mcnemar_p(5, 5) == 1.0                   # 2 * 638/1024 capped at 1
    assert stats.mcnemar_p(4, 0) == pytest.approx(0.125)  # 2 * 1/16
    first = {"t1": True, "t2": True, "t3": True, "t4": False, "t5": True}
    second = {"t1": False, "t2": False, "t3": True, "t4": False, "t6": True}
    p = stats.mcnemar(first, second)
    assert (p.tasks, p.both, p.a_only, p.b_only, p.neither) == (4, 1, 2, 0, 1)
    assert p.p_value == pytest.approx(0.5) and p.effect == pytest.approx(0.5)


def test_task_success_cost_and_median():
    assert stats.task_success([True, True, False]) and not stats.task_success([True, False])
    assert stats.cost_per_solved([0.5, 1.0, 1.5], 2) == pytest.approx(1.5)
    assert stats.cost_per_solved([1.0], 0) is None
    assert stats.median([3.0, 1.0, 2.0]) == 2.0 and stats.median([1.0, 4.0]) == 2.5 and stats.median([]) is None


def test_plan_model_is_the_one_the_loader_uses():
    assert EvalPlan.model_config["extra"] == "forbid"


def test_an_arm_the_runtime_would_refuse_is_refused_at_init(tmp_path):
    from sweep.eval.cells import init_eval
    ds = tmp_path / "ds"
    _task(ds, "alpha", "a")
    bad = PLAN.replace('runtime = "nop"', 'runtime = "command"\nmodel = "small"\nruntime_options = { argv = ["true"] }')
    with pytest.raises(ConfigError) as err:
        init_eval(_write(tmp_path, bad), tmp_path / "camp")
    assert "arm nop" in err.value.message and "model" in err.value.message
    agent = PLAN.replace('runtime = "nop"', 'runtime = "claude-code"')
    with pytest.raises(ConfigError, match="arm nop: runtime claude-code needs a key of the anthropic family") as err:
        init_eval(_write(tmp_path, agent), tmp_path / "camp")
    assert err.value.field == "secrets" and err.value.path == str(tmp_path / "eval.toml")
    keyed = agent.replace("[[arms]]", '[secrets]\nanthropic = { env = "SOME_KEY" }\n\n[[arms]]', 1)
    with pytest.raises(ConfigError, match="arm nop: runtime claude-code spends money") as err:
        init_eval(_write(tmp_path, keyed), tmp_path / "camp")
    assert err.value.field == "arms.1.budget.max_usd"
    missing = keyed.replace("max_turns = 5", "max_turns = 5, max_usd = 1").replace(
        'runtime = "claude-code"', 'runtime = "claude-code"\nruntime_options = { binary = "/nonexistent/claude" }')
    with pytest.raises(ConfigError, match="arm nop: the claude-code CLI .'/nonexistent/claude'. is not installed"):
        init_eval(_write(tmp_path, missing), tmp_path / "camp")
    codex = keyed.replace('"claude-code"', '"codex"').replace("max_turns = 5", "max_turns = 5, max_usd = 1")
    with pytest.raises(ConfigError, match="arm nop: runtime codex needs a key of the openai family"):
        init_eval(_write(tmp_path, codex), tmp_path / "camp")
    unused = PLAN.replace("[[arms]]", '[secrets]\nopenai = { env = "SOME_KEY" }\n\n[[arms]]', 1)
    with pytest.raises(ConfigError, match="no arm's runtime uses the openai key family") as err:
        init_eval(_write(tmp_path, unused), tmp_path / "camp")
    assert err.value.field == "secrets.openai"
    assert not (tmp_path / "camp").exists()


def test_the_plans_secrets_are_checked_like_a_generation_plans(tmp_path):
    for bad, says in (('github = { env = "T" }', "'github', which is not a key family a solver session uses"),
                      ('anthropic = { env = "T", file = "/k" }', "exactly one of file"),
                      ('anthropic = { env = "T", variable = "OPENAI_API_KEY" }', "variable must be one of")):
        with pytest.raises(ConfigError) as err:
            load_eval_plan(_write(tmp_path, PLAN.replace("[[arms]]", f"[secrets]\n{bad}\n\n[[arms]]", 1)))
        assert (err.value.field or "").startswith("secrets") and says in err.value.message, (bad, err.value)


def test_init_is_complete_or_absent_and_clears_what_a_killed_init_left(tmp_path):
    from sweep.eval.cells import init_eval, load_eval
    _task(tmp_path / "ds", "alpha", "a")
    (tmp_path / ".camp.init-999999" / "roles").mkdir(parents=True)     # a killed init's staging
    frozen, manifest, created = init_eval(_write(tmp_path, PLAN), tmp_path / "camp")
    assert created and not (tmp_path / ".camp.init-999999").exists()
    assert load_eval(tmp_path / "camp") == (frozen, manifest) and len(manifest.cells) == 6
    assert sorted(p.name for p in (tmp_path / "camp").iterdir()) == ["campaign.toml", "cells", "eval.json",
                                                                     "manifest.json", "plan.toml", "roles", "runs"]
    # every cell is a queued run at the evaluation table's first phase, in manifest order
    from runstate.runs import list_runs
    records = list_runs(tmp_path / "camp").records
    assert sorted(records) == [c.cell_id for c in manifest.cells]
    assert {(r.state.value, r.phase) for r in records.values()} == {("queued", "cell_solve")}
    assert [records[c.cell_id].panel_index for c in manifest.cells] == [c.position for c in manifest.cells]
    assert init_eval(_write(tmp_path, PLAN), tmp_path / "camp")[2] is False


def test_the_spend_ledger_counts_an_unsettled_reservation_whole(tmp_path):
    from sweep.eval import spend
    assert spend.spent(tmp_path) == 0.0
    a = spend.reserve(tmp_path, "c00000", 0.5)
    spend.settle(tmp_path, a, 0.125)
    b = spend.reserve(tmp_path, "c00001", 0.5)          # a runner killed inside this cell
    assert (a, b) == ("c00000-1", "c00001-1") and spend.spent(tmp_path) == pytest.approx(0.625)
    c = spend.reserve(tmp_path, "c00001", 0.5)          # its next attempt reserves again
    with open(tmp_path / spend.LEDGER, "ab") as fh:
        fh.write(b'{"op": "settle", "id": "c000')       # a half-written line counts for nothing
    assert c == "c00001-2" and spend.spent(tmp_path) == pytest.approx(1.125)


def test_parallel_reservations_never_pass_the_cap(tmp_path):
    """Eight processes (cells in parallel controllers) reserve 0.3 each under a cap of 1.0, released
    at the same instant: exactly three fit, whatever the interleaving (DIR/spend.lock)."""
    import subprocess
    import sys
    import time

    from sweep.eval import spend
    go = tmp_path / "go"
    code = ("import pathlib, sys, time\nfrom sweep.eval import spend\n"
            "out, cell, go = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])\n"
            "while not go.exists(): time.sleep(0.001)\n"
            "rid, _ = spend.reserve_within(out, cell, 0.3, 1.0)\nprint(rid or '')\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), f"c{i:05d}", str(go)],
                              stdout=subprocess.PIPE, text=True) for i in range(8)]
    time.sleep(1.0)          # every process started and waiting
    go.write_text("go")
    got = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert sum(1 for rid in got if rid) == 3 and spend.spent(tmp_path) == pytest.approx(0.9), got


def test_a_spend_cap_needs_every_paid_arm_to_have_an_envelope(tmp_path):
    from sweep.eval.cells import init_eval
    _task(tmp_path / "ds", "alpha", "a")
    with pytest.raises(ConfigError, match="arm oracle: runtime command may spend money") as err:
        init_eval(_write(tmp_path, PLAN.replace("seed = 7\n", "seed = 7\nmax_spend_usd = 5\n")), tmp_path / "camp")
    assert err.value.field == "arms.0.budget.max_usd"
    ok = PLAN.replace("seed = 7\n", "seed = 7\nmax_spend_usd = 5\n").replace(
        'argv = ["true"] }', 'argv = ["true", "{cost_cap_usd}"] }\nbudget = { max_usd = 1 }', 1)
    assert init_eval(_write(tmp_path, ok), tmp_path / "camp")[2]       # nop costs nothing: no envelope needed
