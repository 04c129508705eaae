"""The method registry: each method declared once, its options and flags read from it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from clitools import kernels_compiled_by

from evaluation import methods
from evaluation.methods import (
    METHODS,
    REFERENCE,
    HippoOptions,
    Method,
    MethodOptions,
    Nsga2Options,
    add_method_arguments,
    check_replan_flags,
    default_options,
    options_from_args,
    register,
    unavailable_methods,
)
from formulation.schema import InputError
from solvers.baselines import METHODS as BASELINES


def _parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_method_arguments(parser)
    return parser.parse_args(list(flags))


def test_every_method_is_declared_once_with_a_description():
    assert set(BASELINES) | {REFERENCE, "nsga2", "hippo"} == set(METHODS)
    for name, method in METHODS.items():
        assert method.name == name and method.description
        assert issubclass(method.options_type, MethodOptions)
    assert [n for n, m in METHODS.items() if m.is_reference] == [REFERENCE]
    with pytest.raises(ValueError, match="registered twice"):
        register(Method("nsga2", "again", None))


def test_seeded_and_replanning_are_declared():
    options = default_options()
    seeded = {name for name, m in METHODS.items() if m.is_seeded(options[name])}
    assert seeded == {"nsga2", "dtfm"}
    assert METHODS["hippo"].is_seeded(HippoOptions(samples=2))
    replans = {name for name, m in METHODS.items() if m.replans}
    # the reference re-plans online as the exact engine's least step time of each state
    assert replans == set(METHODS) - {"diloco"}
    assert all(METHODS[name].bound_s(options[name]) > 0 for name in replans)
    assert METHODS[REFERENCE].is_reference


def test_flags_give_each_methods_options():
    options = options_from_args(_parse("--generations", "4", "--population", "10",
                                       "--hippo-samples", "3", "--no-hippo-exhaust"))
    assert options["nsga2"] == Nsga2Options(generations=4, population=10)
    assert options["nsga2"].settings(seed=7).generations == 4
    assert options["nsga2"].settings(seed=7).seed == 7
    hippo = options["hippo"]
    assert (hippo.samples, hippo.exhaust, hippo.pairs) == (3, False, None)
    # unset flags that default to None keep rl.decide's defaults; samples, polish and
    # starts always reach DecisionSettings
    assert hippo.decision_settings() == {"exhaust": False, "samples": 3, "polish": 0,
                                         "starts": False}
    assert options["sailor"] == MethodOptions()
    assert options_from_args(_parse()) == default_options()


def test_a_missing_checkpoint_is_one_clear_error_and_an_input(tmp_path: Path):
    with pytest.raises(InputError, match="--checkpoint: no such file"):
        options_from_args(_parse("--checkpoint", str(tmp_path / "none.pt")))
    given = tmp_path / "agent.pt"
    given.write_bytes(b"")
    options = options_from_args(_parse("--checkpoint", str(given)))
    assert options["hippo"].inputs() == [given]
    assert all(not o.inputs() for name, o in options.items() if name != "hippo")


def test_hippo_without_checkpoint_is_unavailable_and_says_why(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(methods, "HIPPO_CHECKPOINT", tmp_path / "hi_ppo.pt")
    missing = unavailable_methods(default_options())
    assert list(missing) == ["hippo"] and "no Hi-PPO checkpoint" in missing["hippo"]
    given = {**default_options(), "hippo": HippoOptions(checkpoint=str(tmp_path / "x.pt"))}
    assert unavailable_methods(given) == {}
    monkeypatch.setattr(methods, "HIPPO_CHECKPOINT", None)
    assert "not installed" in unavailable_methods(given)["hippo"]


def test_a_hippo_replan_out_of_work_is_no_plan_not_an_error():
    """A state where the masks offer no pair and 1 s of DP work finds none: the online
    re-plan answers None (the policy waits), as where no plan exists, instead of raising."""
    import numpy as np

    from formulation.instance import Instance
    from instances.suites import SUITES_DIR

    instance = Instance.load(SUITES_DIR / "full" / "aws-10-k5-llama2-70b-s5100.json")
    state = instance.with_link_state(free_gpus=np.array([4, 0, 4, 2, 4]))
    hippo = methods.METHODS["hippo"]
    options = hippo.options_type()
    assert hippo.replan(state, 0, options) is None
    assert hippo.replan(state, 0, options) is None  # and the same the second time


def test_the_exact_planner_warms_up_before_its_first_timed_decision():
    """The exact re-plan's limit is wall time: a process's first one would compile or load
    the DP's kernels within it (on a fresh install it ran out, and the online run's numbers
    changed). Making the planner decides once, with no limit, before any timed decision."""
    before, after = kernels_compiled_by(
        "from evaluation.methods import METHODS\n"
        "from evaluation.replanning import Planner\n"
        "Planner('exact', METHODS['exact'].options_type())")
    assert not any(before) and all(after)


def test_a_counted_lower_level_limit_replaces_the_time_limit():
    """``--hippo-lower-work`` alone lifts rl.decide's time limit (a counted limit, so the
    fronts do not depend on the machine); with ``--hippo-lower-time`` both hold."""
    alone = options_from_args(_parse("--hippo-lower-work", "5000"))["hippo"]
    assert alone.decision_settings()["lower_work"] == 5000
    assert alone.decision_settings()["lower_time"] is None
    both = options_from_args(_parse("--hippo-lower-work", "5000", "--hippo-lower-time",
                                    "0.5"))["hippo"]
    assert (both.decision_settings()["lower_work"],
            both.decision_settings()["lower_time"]) == (5000, 0.5)
    assert "lower_work" not in default_options()["hippo"].decision_settings()


def test_deadlines_and_no_fallback_reach_the_decision_settings():
    from rl.decision_settings import REAL_TIME, DecisionSettings

    real_time = options_from_args(_parse("--hippo-deadlines", "--no-hippo-fallback"))["hippo"]
    assert DecisionSettings(**real_time.decision_settings()) == REAL_TIME
    default = default_options()["hippo"].decision_settings()
    assert "deadlines" not in default and "fallback" not in default


def test_a_front_under_a_counted_limit_is_the_same_front_under_any_load(monkeypatch):
    """Every decision of a Hi-PPO front under ``lower_work`` alone gets that DP work and no
    time limit; the limit binds (the front differs from an unlimited one) and the front
    stays the same when every DP run is slowed down (a front under a 50 ms limit loses
    DP runs so, and changes: a scratch check, not asserted here, as it depends on the
    machine's speed)."""
    import time

    import rl.lower
    import solvers.chain
    from formulation.instance import Instance
    from instances.suites import SUITES_DIR
    from solvers.chain import MAX_WORK

    instance = Instance.load(SUITES_DIR / "quick" / "aws-10-k5-llama2-70b-s110.json")
    hippo = METHODS["hippo"]
    hippo.prepare(HippoOptions())  # the scheduler's warm-up decision has no limit at all
    allowances = []
    of = rl.lower.Allowance.of
    monkeypatch.setattr(rl.lower.Allowance, "of", staticmethod(
        lambda seconds, work, start=None: allowances.append((seconds, work))
        or of(seconds, work, start)))

    def front(**options) -> list:
        run = hippo.run(instance, 0, None, HippoOptions(**options), ((1.0, 0.0, 0.0),))
        return sorted(point.objectives for point in run.front.points)

    counted = front(lower_work=20_000)
    assert allowances and set(allowances) == {(None, 20_000)}
    assert counted != front(lower_work=MAX_WORK)
    label_dp = solvers.chain.label_dp

    def slow(*args):  # a slower machine, or one under load
        time.sleep(0.01)
        return label_dp(*args)

    monkeypatch.setattr(solvers.chain, "label_dp", slow)
    assert front(lower_work=20_000) == counted


def test_an_online_run_refuses_hippo_flags_its_replans_do_not_read():
    """Hi-PPO's re-plans are held to a counted work bound, so its time limits, its
    deadlines and its fronts' resumes would be ignored in silence: refused, for Hi-PPO
    only."""
    for flags in (["--hippo-deadlines"], ["--hippo-lower-work", "5000"],
                  ["--no-hippo-resume"]):
        args = _parse(*flags)
        with pytest.raises(InputError, match=f"^{flags[0]}: hippo's online re-plans"):
            check_replan_flags(args, ["greedy", "hippo"])
        check_replan_flags(args, ["greedy"])
    check_replan_flags(_parse("--no-hippo-fallback"), ["hippo"])  # read by the re-plans
