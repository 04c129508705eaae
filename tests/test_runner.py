"""Work units give the same numbers in this process, a local process pool and on Dask."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.methods import Nsga2Options
from evaluation.runner import run_units
from evaluation.units import EvaluationSettings, WorkUnit, without_times
from formulation.schema import read_json
from instances.suites import PREFERENCES
from solvers.parallel import map_tasks

SETTINGS = EvaluationSettings(
    preferences=PREFERENCES, repeats=1,
    options={"nsga2": Nsga2Options(generations=4, population=10, descent=5)})


def _units(suite: Path) -> list[WorkUnit]:
    pairs = [(p, p.with_name(p.name.replace(".json", ".front.json")))
             for p in sorted(suite.glob("*.json")) if not p.name.endswith(".front.json")]
    return [WorkUnit(read_json(instance, "instance"), read_json(front, "front"), method, seed,
                     SETTINGS)
            for instance, front in pairs
            for method, seed in (("nsga2", 0), ("nsga2", 1), ("sailor", 0), ("exact", 0))]


@pytest.fixture(scope="module")
def in_process(tiny_suite: Path) -> list[dict]:
    return run_units(_units(tiny_suite), workers=1)


def test_records_come_back_in_unit_order(in_process: list[dict], tiny_suite: Path):
    units = _units(tiny_suite)
    assert [(r["instance"], r["method"], r["seed"]) for r in in_process] == [
        (u.instance["name"], u.method, u.seed) for u in units]
    seeds = [r for r in in_process if r["method"] == "nsga2"]
    assert all(r["repeatable"] for r in in_process)
    # one anytime point per generation, and the descent's archive last
    assert len(seeds) == 4 and all(len(r["anytime"]) == 4 + 1 for r in seeds)


def test_local_pool_gives_the_same_numbers(in_process: list[dict], tiny_suite: Path):
    done = []
    pooled = run_units(_units(tiny_suite), workers=2, on_done=done.append)
    assert len(done) == len(pooled)
    assert [without_times(r) for r in pooled] == [without_times(r) for r in in_process]


def test_dask_local_cluster_gives_the_same_numbers(in_process: list[dict], tiny_suite: Path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        on_dask = run_units(_units(tiny_suite), scheduler=cluster.scheduler_address)
    assert [without_times(r) for r in on_dask] == [without_times(r) for r in in_process]


def test_unreachable_scheduler_is_a_clear_error(tiny_suite: Path):
    with pytest.raises(ConnectionError, match="cannot reach a Dask scheduler"):
        run_units(_units(tiny_suite)[:1], scheduler="tcp://127.0.0.1:9", connect_timeout_s=1)


def _kernel_threads(_task: int) -> int:
    """The threads this task's compiled kernels may use."""
    import numba

    return numba.get_num_threads()


def test_a_worker_shares_the_cores_with_the_others_for_its_kernels():
    """A local pool's worker gets its share of the cores for the bound tables' threads
    (:func:`solvers.label_kernels.threads_pay`), a Dask task one: the workers do not take
    each other's cores."""
    distributed = pytest.importorskip("distributed")
    import numba

    share = max(1, numba.config.NUMBA_NUM_THREADS // 2)  # the cores, or NUMBA_NUM_THREADS
    assert map_tasks(_kernel_threads, [0, 1], workers=2) == [share] * 2
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                                  dashboard_address=None) as cluster:
        assert map_tasks(_kernel_threads, [0, 1], scheduler=cluster.scheduler_address) \
            == [1, 1]
