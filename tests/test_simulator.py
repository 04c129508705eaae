"""Tests of the event-level 1F1B simulator against hand-computable schedules."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from formulation.simulator import (
    BACKWARD,
    FORWARD,
    PipelineSpec,
    SimulationResult,
    simulate_pipeline,
)


def uniform(stages: int, m: int, f: float, b: float, size: float = 0.0, bw: float = 1.0,
            lat: float = 0.0, **kwargs: object) -> PipelineSpec:
    """A pipeline of identical stages and identical links."""
    return PipelineSpec(
        forward_s=np.full(stages, f), backward_s=np.full(stages, b),
        transfer_bytes=np.full(stages - 1, size), bandwidth_Bps=np.full(stages - 1, bw),
        latency_s=np.full(stages - 1, lat), num_micro_batches=m, **kwargs,
    )


def random_spec(rng: np.random.Generator) -> PipelineSpec:
    stages, m = int(rng.integers(2, 7)), int(rng.integers(1, 13))
    return PipelineSpec(
        forward_s=rng.uniform(0.1, 1.0, stages), backward_s=rng.uniform(0.2, 2.0, stages),
        transfer_bytes=rng.uniform(0.0, 4.0, stages - 1),
        bandwidth_Bps=rng.uniform(1.0, 8.0, stages - 1),
        latency_s=rng.uniform(0.0, 0.5, stages - 1), num_micro_batches=m,
        bandwidth_factor=rng.uniform(0.3, 1.5, (20, stages - 1)), interval_s=0.7,
    )


def closed_form(spec: PipelineSpec) -> float:
    """SPEC 3.1 T_pipe, with stages indexed from the end and delta = size / B + L per link."""
    c = (np.asarray(spec.forward_s) + np.asarray(spec.backward_s))[::-1]
    serial = (np.asarray(spec.transfer_bytes) / np.asarray(spec.bandwidth_Bps))[::-1]
    delta = serial + np.asarray(spec.latency_s)[::-1]
    rounds = [(c[: j + 1].sum() + 2 * delta[:j].sum()) / (j + 1) for j in range(c.size)]
    period = max(c.max(), serial.max(initial=0.0), max(rounds))
    return float((spec.num_micro_batches - 1) * period + c.sum() + 2 * delta.sum())


def test_single_stage_is_serial() -> None:
    spec = PipelineSpec(np.array([1.5]), np.array([2.25]), np.zeros(0), np.zeros(0), np.zeros(0), 7)
    result = simulate_pipeline(spec)
    assert result.makespan_s == pytest.approx(7 * (1.5 + 2.25))
    assert result.link_busy_s.shape == (0,)


@pytest.mark.parametrize(("stages", "m", "f", "b"),
                         list(itertools.product([2, 3, 5], [1, 2, 4, 9], [1.0, 0.5], [1.0, 2.5])))
def test_identical_stages_no_communication(stages: int, m: int, f: float, b: float) -> None:
    """PipeDream-Flush with identical stages: (m + S - 1)(f + b), also for m < S."""
    result = simulate_pipeline(uniform(stages, m, f, b))
    assert result.makespan_s == pytest.approx((m + stages - 1) * (f + b))
    np.testing.assert_allclose(result.stage_busy_s, m * (f + b))


def test_two_stage_schedule_by_hand() -> None:
    """S = 2, m = 2, f = b = 1: the recorded ops match the textbook 1F1B picture."""
    result = simulate_pipeline(uniform(2, 2, 1.0, 1.0), record=True)
    assert result.events is not None
    got = {(e.stage, e.micro_batch, e.kind): (e.start, e.end) for e in result.events}
    assert got == {
        (0, 0, FORWARD): (0, 1), (0, 1, FORWARD): (1, 2), (1, 0, FORWARD): (1, 2),
        (1, 0, BACKWARD): (2, 3), (0, 0, BACKWARD): (3, 4), (1, 1, FORWARD): (3, 4),
        (1, 1, BACKWARD): (4, 5), (0, 1, BACKWARD): (5, 6),
    }


@pytest.mark.parametrize("stages", [2, 3, 6])
def test_latency_single_micro_batch(stages: int) -> None:
    """m = 1: one forward sweep and one backward sweep, each crossing S-1 links once."""
    result = simulate_pipeline(uniform(stages, 1, 0.5, 1.25, lat=0.3))
    assert result.makespan_s == pytest.approx(stages * 1.75 + 2 * (stages - 1) * 0.3)


def test_bandwidth_bound_pipeline() -> None:
    """Big messages, small compute. With S = 2 the forward channel sets the pace: m * bytes / B.
    With more stages the round trip binds first (SPEC 3.1 third term, ~ 2j/(j+1) * bytes / B
    for the stage holding j+1 micro-batches), which the closed form also predicts."""
    m, serial = 256, 2.0
    result = simulate_pipeline(uniform(2, m, 0.01, 0.02, size=2e6, bw=1e6))
    np.testing.assert_allclose(result.link_busy_s, m * serial)
    assert m * serial <= result.makespan_s <= m * serial * 1.02
    deep = uniform(4, m, 0.01, 0.02, size=2e6, bw=1e6, lat=0.05)
    assert simulate_pipeline(deep).makespan_s == pytest.approx(closed_form(deep), rel=0.01)


def test_halving_bandwidth_equals_doubling_bytes() -> None:
    rng = np.random.default_rng(1)
    base = random_spec(rng)
    halved = PipelineSpec(**{**base.__dict__, "bandwidth_factor": base.bandwidth_factor * 0.5})
    doubled = PipelineSpec(**{**base.__dict__, "transfer_bytes": base.transfer_bytes * 2})
    assert simulate_pipeline(halved).makespan_s == pytest.approx(
        simulate_pipeline(doubled).makespan_s, rel=1e-12)
    constant = uniform(3, 5, 1.0, 2.0, size=3.0, bw=1.0, lat=0.2)
    factor = PipelineSpec(**{**constant.__dict__, "bandwidth_factor": np.full((4, 2), 0.5)})
    slow = PipelineSpec(**{**constant.__dict__, "transfer_bytes": np.full(2, 6.0)})
    assert simulate_pipeline(factor).makespan_s == pytest.approx(simulate_pipeline(slow).makespan_s)


def varying_two_stage(start_time_s: float = 0.0, rows: slice = slice(None)) -> PipelineSpec:
    bw_f = np.array([[1.0], [1.0], [0.5], [0.5], [0.25]])
    lat_f = np.array([[1.0], [1.0], [1.0], [1.0], [3.0]])
    return PipelineSpec(
        forward_s=np.array([1.0, 0.5]), backward_s=np.array([1.0, 1.0]),
        transfer_bytes=np.array([10.5]), bandwidth_Bps=np.array([2.0]), latency_s=np.array([0.5]),
        num_micro_batches=1, bandwidth_factor=bw_f[rows], latency_factor=lat_f[rows],
        interval_s=2.0, start_time_s=start_time_s,
    )


def test_factor_change_mid_transfer_by_hand() -> None:
    """Forward message (10.5 B) leaves at t=1: 2 B/s on [1,4) drains 6 B, 1 B/s on [4,8) drains 4 B,
    0.5 B/s from t=8 drains the last 0.5 B by t=9; latency 0.5 * 3 -> arrives 10.5. Stage 1 runs
    [10.5, 12); the gradient leaves at 12 at 0.5 B/s (last factors hold): 21 s + 1.5 -> 34.5;
    stage 0's backward ends at 35.5."""
    result = simulate_pipeline(varying_two_stage(), record=True)
    assert result.events is not None
    starts = {(e.stage, e.kind): e.start for e in result.events}
    assert starts[(1, FORWARD)] == pytest.approx(10.5)
    assert starts[(0, BACKWARD)] == pytest.approx(34.5)
    assert result.makespan_s == pytest.approx(35.5)
    assert result.link_busy_s[0] == pytest.approx(8.0)


def test_start_time_offset_skips_intervals() -> None:
    shifted = simulate_pipeline(varying_two_stage(start_time_s=4.0)).makespan_s
    dropped = simulate_pipeline(varying_two_stage(rows=slice(2, None))).makespan_s
    assert shifted == pytest.approx(dropped)


def test_more_bandwidth_never_slower() -> None:
    rng = np.random.default_rng(7)
    for _ in range(40):
        spec = random_spec(rng)
        base = simulate_pipeline(spec).makespan_s
        boost = np.ones(spec.bandwidth_Bps.size)
        boost[rng.integers(boost.size)] = rng.uniform(1.0, 3.0)
        faster = PipelineSpec(**{**spec.__dict__, "bandwidth_Bps": spec.bandwidth_Bps * boost})
        assert simulate_pipeline(faster).makespan_s <= base + 1e-9
        everywhere = PipelineSpec(**{**spec.__dict__, "bandwidth_Bps": spec.bandwidth_Bps * 2})
        assert simulate_pipeline(everywhere).makespan_s <= base + 1e-9


def test_deterministic() -> None:
    spec = random_spec(np.random.default_rng(3))
    first, second = simulate_pipeline(spec, record=True), simulate_pipeline(spec, record=True)
    assert first.makespan_s == second.makespan_s
    assert first.events == second.events
    np.testing.assert_array_equal(first.link_busy_s, second.link_busy_s)


def test_large_pipeline_is_fast() -> None:
    spec = uniform(20, 512, 1.0, 2.0, size=1e6, bw=1e9, lat=0.01)
    began = time.perf_counter()
    result: SimulationResult = simulate_pipeline(spec)
    assert time.perf_counter() - began < 1.0
    assert result.makespan_s >= (512 + 19) * 3.0


def test_closed_form_comparison_report() -> None:
    """Printed only (pytest -s): the calibrated comparison lives elsewhere. The closed form is
    exact without communication, which is asserted."""
    rng = np.random.default_rng(11)
    for _ in range(8):
        spec = random_spec(rng)
        spec = PipelineSpec(**{**spec.__dict__, "bandwidth_factor": None})
        sim, formula = simulate_pipeline(spec).makespan_s, closed_form(spec)
        print(f"S={spec.forward_s.size} m={spec.num_micro_batches:2d} sim={sim:8.3f} "
              f"closed={formula:8.3f} gap={(formula - sim) / sim:+.2%}")
    silent = uniform(4, 6, 0.7, 1.3)
    assert closed_form(silent) == pytest.approx(simulate_pipeline(silent).makespan_s)


@pytest.mark.parametrize(("field", "value"), [
    ("forward_s", np.ones((2, 3))), ("backward_s", np.array([1.0, 2.0, 3.0])),
    ("virtual_stages", 0), ("num_micro_batches", 3.5),
    ("transfer_bytes", np.array([-1.0])), ("bandwidth_Bps", np.array([0.0])),
    ("latency_s", np.array([np.nan])), ("num_micro_batches", 0),
    ("bandwidth_factor", np.ones((3, 2))), ("latency_factor", -np.ones((3, 1))),
    ("interval_s", 0.0), ("start_time_s", -1.0),
])
def test_validation_names_the_field(field: str, value: object) -> None:
    spec = PipelineSpec(**{**uniform(2, 3, 1.0, 1.0, size=1.0).__dict__, field: value})
    with pytest.raises(ValueError, match=field):
        simulate_pipeline(spec)


def test_last_bandwidth_factor_must_be_positive() -> None:
    spec = PipelineSpec(**{**uniform(2, 1, 1.0, 1.0).__dict__,
                           "bandwidth_factor": np.array([[0.0], [1.0], [0.0]])})
    with pytest.raises(ValueError, match="bandwidth_factor"):
        simulate_pipeline(spec)
    outage = PipelineSpec(**{**uniform(2, 1, 1.0, 1.0, size=1.0).__dict__,
                             "bandwidth_factor": np.array([[0.0], [0.0], [1.0]])})
    # F0 ends at 1; the link is down until t = 2, so 1 B at 1 B/s arrives at 3; stage 1 runs
    # [3, 5]; the gradient arrives at 6; stage 0's backward ends at 7.
    assert simulate_pipeline(outage).makespan_s == pytest.approx(7.0)


# -- interleaved 1F1B -------------------------------------------------------------------------
@pytest.mark.parametrize(("stages", "chunks", "m"), [(2, 2, 4), (4, 2, 8), (4, 3, 8),
                                                      (8, 4, 16), (4, 2, 4)])
def test_interleaved_makespan_is_megatrons_without_communication(stages: int, chunks: int,
                                                                 m: int) -> None:
    """SC'21 section 2.2: with v chunks per stage the bubble shrinks v-fold, a step of
    identical stages takes (m + (S - 1) / v) (f + b)."""
    links = stages  # the boundaries and the wrap-around
    spec = PipelineSpec(forward_s=np.ones(stages), backward_s=np.full(stages, 2.0),
                        transfer_bytes=np.zeros(links), bandwidth_Bps=np.ones(links),
                        latency_s=np.zeros(links), num_micro_batches=m, virtual_stages=chunks)
    assert simulate_pipeline(spec).makespan_s == pytest.approx((m + (stages - 1) / chunks) * 3)


def test_interleaved_ops_follow_megatrons_order() -> None:
    """Each stage runs every chunk of every micro-batch once, forwards in rounds of S
    micro-batches per chunk, and every forward chunk after its input arrived."""
    spec = PipelineSpec(forward_s=np.ones(3), backward_s=np.full(3, 2.0),
                        transfer_bytes=np.ones(3), bandwidth_Bps=np.full(3, 4.0),
                        latency_s=np.full(3, 0.1), num_micro_batches=6, virtual_stages=2)
    events = simulate_pipeline(spec, record=True).events
    for stage in range(3):
        mine = [e for e in events if e.stage == stage]
        assert len(mine) == 2 * 6 * 2
        forwards = [(e.chunk, e.micro_batch) for e in mine if e.kind == "F"]
        assert forwards[:6] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    ends = {(e.stage, e.chunk, e.micro_batch, e.kind): e for e in events}
    for e in events:
        if e.kind == "F" and e.stage == 0 and e.chunk == 1:  # waits for the wrap-around
            assert e.start >= ends[(2, 0, e.micro_batch, "F")].end + 0.25 + 0.1


@pytest.mark.parametrize(("stages", "m"), [(1, 4), (3, 4)])
def test_interleaving_needs_stages_and_whole_rounds(stages: int, m: int) -> None:
    spec = PipelineSpec(forward_s=np.ones(stages), backward_s=np.ones(stages),
                        transfer_bytes=np.zeros(stages), bandwidth_Bps=np.ones(stages),
                        latency_s=np.zeros(stages), num_micro_batches=m, virtual_stages=2)
    with pytest.raises(ValueError, match="interleaving needs S >= 2 stages and micro-batches"):
        simulate_pipeline(spec)
