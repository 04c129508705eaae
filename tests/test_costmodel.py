"""Cost-model terms against the SPEC formulas, computed by hand from the instance's numbers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from formulation.costmodel import EFFICIENCY, CostModel
from formulation.evaluator import evaluate_plans
from formulation.instance import Domain, Instance, Links, Training
from formulation.plan import Plan, Stage
from formulation.presets import GPUS, MODELS

REL = 1e-9
GBIT = 1e9 / 8


def exact(value: float) -> object:
    return pytest.approx(value, rel=REL, abs=0.0)


@pytest.fixture(scope="module")
def shape(hand_instance: Instance) -> tuple[int, int, int, int, int, int]:
    """(s, h, a, l, V, G) of the GPT model of the hand instance."""
    m = hand_instance.model
    return m.seq_len, m.hidden, m.heads, m.layers, m.vocab, hand_instance.training.global_batch


def with_zero_stage(instance: Instance, stage: int) -> CostModel:
    return with_training(instance, zero_stage=stage)


def with_training(instance: Instance, **changes) -> CostModel:
    return CostModel(instance.replace(
        training=dataclasses.replace(instance.training, **changes)))


# -- FLOPs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("b", [1, 2, 4, 8])
def test_layer_forward_flops_gpt(cost: CostModel, shape, b: int) -> None:
    s, h, *_ = shape
    assert cost.layer_forward_flops(b) == exact(24 * b * s * h**2 + 4 * b * s**2 * h)


def test_model_flops_per_step_is_megatron_without_recompute(cost: CostModel, shape) -> None:
    # 3 passes (forward + 2x backward) of every layer and of the logit layer. Megatron's
    # (SC'21, eq. 3) 96 B s l h^2 (1 + s/6h + V/16lh) counts 4 passes of the layers (full
    # recompute) and 3 of the logits; without recompute the layer part scales by 3/4 and the
    # logit part 6 B s h V stays, i.e. V/(12 l h) inside the bracket (not V/(16 l h)).
    s, h, _, l, v, batch = shape
    expected = 72 * batch * s * l * h**2 * (1 + s / (6 * h) + v / (12 * l * h))
    assert cost.model_flops_per_step() == exact(expected)


def test_hardware_flops_with_full_recompute_is_megatron_eq3(hand_instance: Instance,
                                                            shape) -> None:
    """What the paper reports (achieved TFLOP/s) counts the recomputed forward."""
    s, h, _, l, v, batch = shape
    plan = Plan(dp=1, micro_batch=1, stages=(Stage(0, 12, 4, "full"), Stage(0, 12, 4, "full")))
    r = evaluate_plans(hand_instance, [plan])
    hardware = float(r.achieved_tflops_per_gpu[0] * 1e12 * r.gpus[0] * r.step_time_s[0])
    expected = 96 * batch * s * l * h**2 * (1 + s / (6 * h) + v / (16 * l * h))
    assert hardware == pytest.approx(expected, rel=1e-9)


# -- memory --------------------------------------------------------------------------------
@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_layer_activation_bytes_korthikanti(cost: CostModel, shape, b: int, t: int) -> None:
    s, h, a, *_ = shape
    assert cost.layer_activation_bytes(b, t, "none") == exact(
        s * b * h * (34 / t + 5 * a * s / (h * t)))
    assert cost.layer_activation_bytes(b, t, "selective") == exact(34 * s * b * h / t)
    assert cost.layer_activation_bytes(b, t, "full") == exact(2 * s * b * h / t)


@pytest.mark.parametrize(("t", "dp"), [(1, 1), (2, 4), (8, 8), (4, 3)])
def test_state_bytes_per_param(hand_instance: Instance, t: int, dp: int) -> None:
    assert with_zero_stage(hand_instance, 1).state_bytes_per_param(t, dp) == exact(
        (4 + 12 / dp) / t)
    assert with_zero_stage(hand_instance, 0).state_bytes_per_param(t, dp) == exact(16 / t)


@pytest.mark.parametrize(("t", "dp"), [(1, 1), (2, 4), (8, 8), (4, 3)])
def test_state_bytes_per_param_zero_2_and_3(hand_instance: Instance, t: int, dp: int) -> None:
    """ZeRO-2 shards the bf16 gradients too (Rajbhandari et al. 2020: 2 + 14 / Nd bytes),
    ZeRO-3 everything (16 / Nd)."""
    assert with_zero_stage(hand_instance, 2).state_bytes_per_param(t, dp) == exact(
        (2 + 14 / dp) / t)
    assert with_zero_stage(hand_instance, 3).state_bytes_per_param(t, dp) == exact(16 / dp / t)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_zero_3_holds_two_gathered_layers_while_running(hand_instance: Instance, t: int) -> None:
    zero3, zero2 = with_zero_stage(hand_instance, 3), with_zero_stage(hand_instance, 2)
    gathered = 2 * 2 * hand_instance.model.layer_params / t
    for mode in ("none", "selective", "full"):
        assert zero3.workspace_bytes(2, t, mode) == exact(zero2.workspace_bytes(2, t, mode)
                                                          + gathered)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_flash_attention_stores_no_scores(hand_instance: Instance, shape, b: int,
                                          t: int) -> None:
    """FlashAttention keeps no s x s tensor: without recompute a layer stores what eager
    attention stores with selective recompute, plus one fp32 log-sum-exp per head and token;
    selective recompute then also drops the core's output (2 s b h) and those statistics."""
    s, h, a, *_ = shape
    flash, eager = with_training(hand_instance, attention="flash"), CostModel(hand_instance)
    assert flash.layer_activation_bytes(b, t, "none") == exact(
        eager.layer_activation_bytes(b, t, "selective") + 4 * a * s * b / t)
    assert flash.layer_activation_bytes(b, t, "selective") == exact(32 * s * b * h / t)
    assert flash.layer_activation_bytes(b, t, "full") == exact(2 * s * b * h / t)
    assert flash.workspace_bytes(b, t, "selective") == exact((2 * h + 4 * a) * s * b / t)
    assert flash.workspace_bytes(b, t, "none") == 0.0


def test_flash_attention_time_has_no_quadratic_hbm_traffic(hand_instance: Instance) -> None:
    """The core's time is the causal share of its two GEMMs' compute, whatever the cost of
    streaming scores; its backward is 2.5 times its forward."""
    flash = with_training(hand_instance, attention="flash")
    model = hand_instance.model
    s, d, b, t = model.seq_len, model.head_dim, 2, 2
    heads = b * model.heads / t
    gemms = 2 * (2 * s * d * s * heads) / (hand_instance.gpu.peak_tflops * 1e12
                                            * _eta(s, d, s))
    assert flash.attention_core_time(b, t) == exact(0.57 * gemms)
    eager = CostModel(hand_instance)
    assert flash.attention_core_time(b, t) < eager.attention_core_time(b, t)
    slow_hbm = dataclasses.replace(EFFICIENCY, softmax_bytes_per_score=1e3)
    assert CostModel(flash.instance, slow_hbm).attention_core_time(b, t) \
        == flash.attention_core_time(b, t)
    work = flash.layer_forward_time(b, t) - 2 * flash.tp_allreduce_time(b, t)
    core = flash.attention_core_time(b, t)
    assert flash.layer_backward_time(b, t, "none") == exact(
        2 * (work - core) + 2.5 * core + 2 * flash.tp_allreduce_time(b, t))


def test_llama2_7b_parameter_count() -> None:
    model = MODELS["llama2-7b"]
    h, f = model.hidden, model.ffn
    assert model.layer_params == 4 * h * h + 3 * h * f + 2 * h  # MHA, SwiGLU, two RMSNorms
    assert model.total_params == pytest.approx(6.74e9, rel=0.01)


# -- communication -------------------------------------------------------------------------
@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("b", [1, 2])
def test_tp_allreduce_time(hand_instance: Instance, cost: CostModel, shape, b: int,
                           t: int) -> None:
    s, h, *_ = shape
    nvlink = hand_instance.gpu.nvlink_gbps * 1e9 * EFFICIENCY.collective_efficiency
    expected = (2 * (t - 1) / t * b * s * h * 2 / nvlink
                + 2 * (t - 1) * EFFICIENCY.collective_step_latency_s)
    assert cost.tp_allreduce_time(b, t) == exact(expected)


def test_tp_allreduce_time_without_tp_is_zero(cost: CostModel) -> None:
    assert cost.tp_allreduce_time(4, 1) == 0.0


@pytest.mark.parametrize(("k", "k2"), [(0, 1), (1, 2), (2, 0)])
@pytest.mark.parametrize(("b", "dp"), [(1, 1), (2, 4)])
def test_boundary_delay_over_wan(hand_instance: Instance, cost: CostModel, shape, k: int,
                                 k2: int, b: int, dp: int) -> None:
    s, h, *_ = shape
    links = hand_instance.links
    expected = (dp * b * s * h * 2 / (links.bandwidth_gbps[k, k2] * 1e9 / 8)
                + links.latency_ms[k, k2] / 1000)
    assert float(cost.boundary_delay(k, k2, b, dp)) == exact(expected)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_boundary_delay_inside_a_domain_ignores_dp(hand_instance: Instance, cost: CostModel,
                                                   shape, k: int) -> None:
    s, h, *_ = shape
    domain = hand_instance.domains[k]
    expected = (2 * s * h * 2 / (domain.intra_bandwidth_gbps * GBIT)
                + domain.intra_latency_ms / 1000)
    assert float(cost.boundary_delay(k, k, 2, 8)) == exact(expected)


@pytest.mark.parametrize(("k", "k2"), [(0, 1), (2, 1)])
def test_boundary_cost(hand_instance: Instance, cost: CostModel, shape, k: int, k2: int) -> None:
    s, h, *_ = shape
    b, dp, m = 2, 4, 8
    activation = b * s * h * 2
    expected = 2 * m * dp * activation * hand_instance.links.price_per_gb[k, k2] / 1e9
    assert expected > 0
    assert float(cost.boundary_cost(k, k2, b, dp, m)) == exact(expected)
    assert float(cost.boundary_cost(k, k, b, dp, m)) == 0.0


def test_allreduce_without_data_parallelism_is_free(cost: CostModel) -> None:
    assert float(cost.allreduce_time(0, 1e9, 4, 1)) == 0.0


@pytest.mark.parametrize(("domain", "t", "dp"),
                         [(0, 4, 2), (0, 1, 8), (0, 4, 4), (1, 2, 8), (2, 8, 2)])
def test_allreduce_time_ring(hand_instance: Instance, cost: CostModel, domain: int, t: int,
                             dp: int) -> None:
    params = 3.0e8
    d, gpu = hand_instance.domains[domain], hand_instance.gpu
    if dp * t <= gpu.gpus_per_node:  # all replicas in one node: NVLink
        bandwidth = gpu.nvlink_gbps * 1e9
    else:  # the slower of the domain network and the GPU's NIC
        bandwidth = min(d.intra_bandwidth_gbps, gpu.nic_gbps) * GBIT
    bandwidth *= EFFICIENCY.collective_efficiency
    expected = (2 * (dp - 1) / dp * 2 * params / t / bandwidth
                + 2 * (dp - 1) * d.intra_latency_ms / 1000)
    assert float(cost.allreduce_time(domain, params, t, dp)) == exact(expected)
    assert float(with_training(hand_instance, dp_overlap=0.25).allreduce_time(
        domain, params, t, dp)) == exact(0.75 * expected)
    # ZeRO-3: two weight gathers and one gradient reduce-scatter per micro-batch, each half
    # of an all-reduce's bytes and steps
    assert float(with_zero_stage(hand_instance, 3).allreduce_time(
        domain, params, t, dp, 6)) == exact(6 * 3 / 2 * expected)


@pytest.mark.parametrize("overlap", [0.0, 0.4, 1.0])
def test_tp_overlap_hides_a_share_of_the_all_reduces(hand_instance: Instance, cost: CostModel,
                                                     overlap: float) -> None:
    hidden = with_training(hand_instance, tp_overlap=overlap)
    assert hidden.tp_allreduce_time(2, 4) == exact((1 - overlap) * cost.tp_allreduce_time(2, 4))
    assert hidden.layer_forward_time(2, 4) == exact(
        cost.layer_forward_time(2, 4) - 2 * overlap * cost.tp_allreduce_time(2, 4))


# -- compute roofline ----------------------------------------------------------------------
def _eta(*dims: float) -> float:
    eta = EFFICIENCY.matmul_eta_max
    for dim in dims:
        eta *= dim / (dim + EFFICIENCY.matmul_half_dim)
    return eta


def test_big_gemm_is_compute_bound(hand_instance: Instance, cost: CostModel) -> None:
    m = k = n = 8192
    gpu = hand_instance.gpu
    compute = 2 * m * k * n / (gpu.peak_tflops * 1e12 * _eta(m, k, n))
    memory = 2 * (m * k + k * n + m * n) / (gpu.hbm_gbps * 1e9 * EFFICIENCY.hbm_efficiency)
    assert compute > 10 * memory
    assert cost.matmul_time(m, k, n) == exact(compute)


def test_thin_gemm_is_memory_bound(hand_instance: Instance, cost: CostModel) -> None:
    m, k, n = 8192, 8192, 1  # a matrix-vector product
    gpu = hand_instance.gpu
    compute = 2 * m * k * n / (gpu.peak_tflops * 1e12 * _eta(m, k, n))
    memory = 2 * (m * k + k * n + m * n) / (gpu.hbm_gbps * 1e9 * EFFICIENCY.hbm_efficiency)
    assert memory > compute
    assert cost.matmul_time(m, k, n) == exact(memory)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_backward_is_twice_forward_plus_allreduces(cost: CostModel, t: int) -> None:
    b = 2
    forward, allreduce = cost.layer_forward_time(b, t), cost.tp_allreduce_time(b, t)
    work = forward - 2 * allreduce
    assert cost.layer_backward_time(b, t, "none") == exact(2 * work + 2 * allreduce)
    assert cost.layer_backward_time(b, t, "full") == exact(2 * work + 2 * allreduce + forward)
    assert cost.layer_backward_time(b, t, "selective") == exact(
        2 * work + 2 * allreduce + cost.attention_core_time(b, t))


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_layer_forward_cannot_beat_the_best_gemm_efficiency(hand_instance: Instance,
                                                           cost: CostModel, b: int,
                                                           t: int) -> None:
    best = hand_instance.gpu.peak_tflops * 1e12 * EFFICIENCY.matmul_eta_max
    floor = cost.layer_forward_flops(b) / t / best
    assert cost.layer_forward_time(b, t) > floor


def test_model_flops_scale_with_other_presets() -> None:
    """The GPT formula is not special-cased: GPT-3 175B on H100 gives the same closed form."""
    model = MODELS["gpt3-175b"]
    zero = np.zeros((1, 1))
    instance = Instance(name="x", gpu=GPUS["H100-80GB"],
                        domains=(Domain("d", 8, 8, 200.0, 0.01),), links=Links(zero, zero, zero),
                        model=model, training=Training(global_batch=1536))
    s, h, l, v = model.seq_len, model.hidden, model.layers, model.vocab
    expected = 72 * 1536 * s * l * h**2 * (1 + s / (6 * h) + v / (12 * l * h))
    assert CostModel(instance).model_flops_per_step() == exact(expected)
