"""Coefficients of the cost model (SPEC section 3): the only source of times, bytes and prices.

Everything the evaluator, the batched evaluator and the MILP need is a function of the
instance and of one of the per-stage choices (micro-batch ``b``, tensor degree ``t``,
recompute mode, dp degree ``r``, domain, link, position from the end of the pipeline). The
functions are written so that stage-level quantities are affine in the number of layers of a
stage: ``layers * per_layer + fixed``. That is what lets the MILP use them as coefficients.

Compute follows an operator-level roofline: every operator of a transformer layer costs
``max(FLOPs / (t peak eta(shape)), bytes / (t HBM_bw hbm_eff))``. The shape-dependent
efficiency of a matrix multiply ``(M x K) @ (K x N)`` is ``eta_max * sat(M) sat(K) sat(N)``
with ``sat(x) = x / (x + x_half)``: small dimensions (thin tensor-parallel shards, per-head
attention matmuls) run further from peak. The constants are calibrated against Megatron-LM
per GPU generation (:mod:`formulation.calibration`, ``tests/test_calibration.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from formulation.instance import Instance

BYTES_PER_VALUE = 2  # bf16 activations, gradients and weights
OPTIMIZER_STATE_BYTES = 12  # per parameter: fp32 master weights, Adam's m and v
# what a parameter carries beyond one step (weights and optimizer state, not gradients): a
# checkpoint's bytes, and what a stage moving to another domain sends
PERSISTENT_BYTES_PER_PARAM = BYTES_PER_VALUE + OPTIMIZER_STATE_BYTES
# FlashAttention (Dao et al. 2022; FlashAttention-2, Dao 2023). Its backward pass runs five
# matrix products where the forward runs two (it recomputes the scores instead of storing
# them): 2.5 times the forward's work, against the 2 of every other operator. With the causal
# mask of a decoder it skips the blocks above the diagonal: FlashAttention-2 (section 3.1.1)
# reports 1.7-1.8x the speed of the unmasked kernel, so a causal call takes 0.57 of its time.
FLASH_BACKWARD_WORK = 2.5
FLASH_CAUSAL_TIME_SHARE = 0.57
LSE_BYTES = 4  # FlashAttention keeps one fp32 log-sum-exp per head and token for the backward
GBIT = 1e9 / 8  # bytes per second in one Gbit/s
GB = 1e9


@dataclass(frozen=True)
class Efficiency:
    """Efficiency constants of one GPU generation (:data:`EFFICIENCY_BY_GPU`); the defaults
    are the A100's, fitted to Megatron-LM SC'21 Table 1 (``python -m formulation.calibration
    --fit``)."""

    matmul_eta_max: float = 0.74  # best achievable share of peak for a large GEMM
    matmul_half_dim: float = 56.0  # dimension at which a GEMM side halves efficiency
    hbm_efficiency: float = 0.80  # share of HBM bandwidth reached by streaming kernels
    collective_efficiency: float = 0.65  # share of link bandwidth reached by NCCL rings
    collective_step_latency_s: float = 5e-6  # per ring step inside a node
    # Bytes moved per token by the memory-bound operators of one layer's forward (norms,
    # residual adds, dropout, activation function), as multiples of hidden and FFN width.
    elementwise_bytes_per_hidden: float = 20.0
    elementwise_bytes_per_ffn: float = 6.0
    softmax_bytes_per_score: float = 8.0  # read + write scores, dropout mask
    cross_entropy_bytes_per_logit: float = 12.0  # fp32 logits: softmax, loss, gradient
    optimizer_bytes_per_param: float = 36.0  # Adam step: read/write master, m, v, grad, param


EFFICIENCY = Efficiency()
# Per GPU generation (python -m formulation.calibration --fit: a grid search minimising the
# largest relative error over the generation's calibration rows). A100: the constants above,
# fitted on Megatron-LM SC'21 Table 1 (Korthikanti et al. 2022 is held out and lands within
# 6.9 %). H100: fitted on NVIDIA's DGX Cloud BF16 recipes (Megatron-Core, FlashAttention,
# overlapped communication): its GEMMs reach a smaller share of a 3.2x larger peak, and
# thinner ones sooner fall off it. Constants are looked up by the GPU's name: a GPU without
# its own (the Ascend 910B, or one of another name) uses the A100's, uncalibrated.
EFFICIENCY_BY_GPU: dict[str, Efficiency] = {
    "A100-80GB": EFFICIENCY,
    "H100-80GB": Efficiency(matmul_eta_max=0.65, matmul_half_dim=96.0, hbm_efficiency=0.70,
                            collective_efficiency=0.65),
}


def efficiency_for(gpu_name: str) -> Efficiency:
    return EFFICIENCY_BY_GPU.get(gpu_name, EFFICIENCY)


def _cached(method):
    """Memoise a coefficient on its CostModel (not globally, so instances can be freed)."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self, *args):
        key = (name, *args)
        try:
            return self._cache[key]
        except KeyError:
            value = self._cache[key] = method(self, *args)
            return value

    return wrapper


class CostModel:
    """Per-instance coefficient functions. Cached: the evaluator calls them in hot loops."""

    def __init__(self, instance: Instance, efficiency: Efficiency | None = None):
        self.instance = instance
        self.eff = efficiency = efficiency or efficiency_for(instance.gpu.name)
        self._cache: dict[tuple, object] = {}
        self.domain_names = [d.name for d in instance.domains]
        self.free_gpus_total = max(1, sum(d.free_gpus for d in instance.domains))
        gpu, model = instance.gpu, instance.model
        self.peak = gpu.peak_tflops * 1e12
        self.hbm_bw = gpu.hbm_gbps * GB * efficiency.hbm_efficiency
        self.nvlink_bw = gpu.nvlink_gbps * GB * efficiency.collective_efficiency
        self.usable_memory = gpu.hbm_gb * GB * (1 - instance.training.memory_margin)
        self.layer_params = model.layer_params
        self.embedding_params = model.embedding_params
        # The LM head (and final norm) sits on the last stage; a tied head still needs its own
        # copy there as soon as the first and last stage differ (Megatron does the same).
        self.head_params = model.vocab * model.hidden + model.hidden
        # Link figures as arrays in SI units, indexed by domain (the diagonal of the WAN
        # matrices is unused: stages in one domain talk over the intra-domain network).
        links = instance.links
        self.intra_bandwidth = np.array([d.intra_bandwidth_gbps for d in instance.domains]) * GBIT
        self.intra_latency = np.array([d.intra_latency_ms for d in instance.domains]) * 1e-3
        self.wan_bandwidth = np.where(links.bandwidth_gbps > 0, links.bandwidth_gbps, 1.0) * GBIT
        self.wan_latency = links.latency_ms * 1e-3
        self.price = links.price_per_gb
        # every ordered pair's link, the intra-domain network on the diagonal: one look-up
        # per direction on the evaluator's hot path
        self.bandwidth = self.wan_bandwidth.copy()
        np.fill_diagonal(self.bandwidth, self.intra_bandwidth)
        self.latency = self.wan_latency.copy()
        np.fill_diagonal(self.latency, self.intra_latency)

    # -- operator roofline ----------------------------------------------------------------
    def _sat(self, dim: float) -> float:
        return dim / (dim + self.eff.matmul_half_dim)

    def matmul_time(self, m: float, k: float, n: float, count: float = 1.0) -> float:
        """``count`` independent (m x k) @ (k x n) products on one GPU: the slower of their
        compute and their operands' and result's HBM traffic."""
        bytes_moved = BYTES_PER_VALUE * (m * k + k * n + m * n) * count
        return max(self.matmul_compute_time(m, k, n, count), bytes_moved / self.hbm_bw)

    def stream_time(self, bytes_moved: float) -> float:
        return bytes_moved / self.hbm_bw

    def tp_allreduce_time(self, b: int, t: int) -> float:
        """One all-reduce of a (b, s, h) bf16 activation among t GPUs over NVLink (with
        sequence parallelism a reduce-scatter and an all-gather, the same bytes), less the
        share ``training.tp_overlap`` hidden behind the GEMMs it feeds."""
        if t == 1:
            return 0.0
        size = b * self.instance.model.seq_len * self.instance.model.hidden * BYTES_PER_VALUE
        return (1 - self.instance.training.tp_overlap) * (
            2 * (t - 1) / t * size / self.nvlink_bw
            + 2 * (t - 1) * self.eff.collective_step_latency_s)

    # -- one transformer layer, one micro-batch, per GPU of a t-way shard ------------------
    @property
    def flash(self) -> bool:
        return self.instance.training.attention == "flash"

    def matmul_compute_time(self, m: float, k: float, n: float, count: float = 1.0) -> float:
        """The compute side of :meth:`matmul_time` alone (a fused kernel's, whose operands and
        result stay on chip): FLOPs at the shape's share ``eta_max sat(m) sat(k) sat(n)`` of
        the peak."""
        eta = self.eff.matmul_eta_max * self._sat(m) * self._sat(k) * self._sat(n)
        return 2.0 * m * k * n * count / (self.peak * eta)

    @_cached
    def attention_core_time(self, b: int, t: int) -> float:
        """Forward of scores, softmax and attention-times-V: what selective recompute redoes.

        ``eager``: two batched GEMMs that write and read the s x s scores, and a softmax that
        streams them through HBM. ``flash``: the same two products at the GEMM roofline's
        shape efficiency, without any s^2 HBM traffic, on the causal share of the blocks."""
        model = self.instance.model
        s, d = model.seq_len, model.head_dim
        heads = b * model.heads / t
        if self.flash:
            return FLASH_CAUSAL_TIME_SHARE * (self.matmul_compute_time(s, d, s, heads)
                                              + self.matmul_compute_time(s, s, d, heads))
        scores = self.matmul_time(s, d, s, heads)
        softmax = self.stream_time(heads * s * s * self.eff.softmax_bytes_per_score)
        context = self.matmul_time(s, s, d, heads)
        return scores + softmax + context

    @_cached
    def layer_forward_time(self, b: int, t: int) -> float:
        """Forward of one layer incl. its two tensor-parallel all-reduces (SPEC 3)."""
        model = self.instance.model
        h, f = model.hidden, model.ffn
        tokens = b * model.seq_len
        mlp_in_width = (2 if model.gated_mlp else 1) * f
        matmuls = (self.matmul_time(tokens, h, (h + 2 * model.kv_hidden) / t)  # QKV
                   + self.matmul_time(tokens, h / t, h)  # attention output projection
                   + self.matmul_time(tokens, h, mlp_in_width / t)  # MLP up (+ gate)
                   + self.matmul_time(tokens, f / t, h))  # MLP down
        elementwise = self.stream_time(tokens * (self.eff.elementwise_bytes_per_hidden * h
                                                 + self.eff.elementwise_bytes_per_ffn * f) / t)
        return (matmuls + self.attention_core_time(b, t) + elementwise
                + 2 * self.tp_allreduce_time(b, t))

    @_cached
    def layer_backward_time(self, b: int, t: int, recompute: str) -> float:
        """Backward (2x the forward work, 2.5x for FlashAttention's core, two all-reduces) plus
        the recomputed forward part."""
        forward_work = self.layer_forward_time(b, t) - 2 * self.tp_allreduce_time(b, t)
        core_work = (FLASH_BACKWARD_WORK - 2) * self.attention_core_time(b, t) if self.flash \
            else 0.0
        backward = 2 * forward_work + core_work + 2 * self.tp_allreduce_time(b, t)
        if recompute == "full":
            backward += self.layer_forward_time(b, t)
        elif recompute == "selective":
            backward += self.attention_core_time(b, t)
        return backward

    def layer_compute_time(self, b: int, t: int, recompute: str) -> float:
        """c per layer: forward + backward of one micro-batch."""
        return self.layer_forward_time(b, t) + self.layer_backward_time(b, t, recompute)

    @_cached
    def edge_times(self, b: int, t: int, first: bool, last: bool) -> tuple[float, float]:
        """(forward, backward) of the embedding (first stage) and LM head + loss (last stage)."""
        model = self.instance.model
        tokens = b * model.seq_len
        forward = backward = 0.0
        if first:  # vocab-parallel lookup: stream the rows and all-reduce; backward scatters
            lookup = self.stream_time(2 * tokens * model.hidden * BYTES_PER_VALUE / t)
            forward += lookup + self.tp_allreduce_time(b, t)
            backward += 2 * lookup
        if last:  # logits GEMM, then softmax + cross-entropy and its gradient in fp32
            logits = self.matmul_time(tokens, model.hidden, model.vocab / t)
            loss = self.stream_time(tokens * model.vocab / t
                                    * self.eff.cross_entropy_bytes_per_logit)
            forward += logits + loss / 2
            backward += 2 * logits + loss / 2 + self.tp_allreduce_time(b, t)
        return forward, backward

    def edge_compute_time(self, b: int, t: int, first: bool, last: bool) -> float:
        """Forward + backward of the embedding and/or LM head carried by a stage."""
        return sum(self.edge_times(b, t, first, last))

    # -- FLOPs (for MFU and the Megatron calibration) --------------------------------------
    def layer_forward_flops(self, b: int) -> float:
        """Model FLOPs of one layer's forward; 24 b s h^2 + 4 b s^2 h for a GPT layer."""
        model = self.instance.model
        h, s = model.hidden, model.seq_len
        tokens = b * s
        mlp = (3 if model.gated_mlp else 2) * h * model.ffn
        linear = 2 * tokens * (h * (h + 2 * model.kv_hidden) + h * h + mlp)
        return linear + 4 * b * s * s * h

    def head_forward_flops(self, b: int) -> float:
        model = self.instance.model
        return 2.0 * b * model.seq_len * model.hidden * model.vocab

    @_cached
    def recompute_flops_per_layer(self, b: int, recompute: str) -> float:
        if recompute == "full":
            return self.layer_forward_flops(b)
        if recompute == "selective":
            return 4.0 * b * self.instance.model.seq_len ** 2 * self.instance.model.hidden
        return 0.0

    @_cached
    def model_flops_per_step(self) -> float:
        """Useful FLOPs of one optimizer step: 3 x forward of every layer and the head."""
        model = self.instance.model
        per_sequence = model.layers * self.layer_forward_flops(1) + self.head_forward_flops(1)
        return 3.0 * per_sequence * self.instance.training.global_batch

    # -- memory (bytes per GPU) --------------------------------------------------------------
    @_cached
    def layer_activation_bytes(self, b: int, t: int, recompute: str) -> float:
        """Activations one layer keeps per in-flight micro-batch (Korthikanti et al. 2022).

        ``eager``: ``s b h (34/t + 5 a s/(h t))`` for a GPT layer without recompute,
        ``34 s b h / t`` with selective and ``2 s b h / t`` with full recompute. Generalised
        here to grouped KV heads and gated MLPs; equal to the SPEC formulas for GPT shapes.
        ``flash``: the ``5 a s^2 b`` of scores, softmax and dropout mask are never stored;
        the kernel keeps one fp32 log-sum-exp per head and token instead. Selective recompute
        (of the attention core) then drops the core's output (``2 s b h``) and those
        statistics, rebuilt in the backward.
        """
        model = self.instance.model
        s, h = model.seq_len, model.hidden
        if recompute == "full":
            return 2.0 * s * b * h / t
        mlp = (6 if model.gated_mlp else 4) * model.ffn
        per_token = 14 * h + 4 * model.kv_hidden + mlp
        stored = s * b * per_token / t
        if self.flash:
            statistics = LSE_BYTES * model.heads * s * b / t
            return stored + statistics if recompute == "none" \
                else stored - BYTES_PER_VALUE * s * b * h / t
        if recompute == "none":
            stored += 5.0 * model.heads * s * s * b / t
        return stored

    def workspace_bytes(self, b: int, t: int, recompute: str) -> float:
        """Transient bytes while one layer runs its backward: the activations recompute
        rebuilds, and under ZeRO-3 the gathered weights of the running layer and of the one
        prefetched (bf16)."""
        model = self.instance.model
        gathered = (2 * BYTES_PER_VALUE * self.layer_params / t
                    if self.instance.training.zero_stage == 3 else 0.0)
        if recompute == "full":
            return self.layer_activation_bytes(b, t, "none") + gathered
        if recompute == "selective":
            if self.flash:
                rebuilt = (BYTES_PER_VALUE * model.hidden + LSE_BYTES * model.heads) \
                    * model.seq_len * b / t
            else:
                rebuilt = 5.0 * model.heads * model.seq_len ** 2 * b / t
            return rebuilt + gathered
        return gathered

    def logits_bytes(self, b: int, t: int) -> float:
        """bf16 logits and fp32 softmax of the last stage."""
        model = self.instance.model
        return 6.0 * b * model.seq_len * model.vocab / t

    def state_bytes_per_param(self, t, dp):
        """Model states per parameter per GPU (ZeRO, Rajbhandari et al. 2020): bf16 weights
        (2 bytes) and gradients (2) and fp32 master, m and v (12); ZeRO-1 divides the 12 by
        dp, ZeRO-2 also the gradients, ZeRO-3 everything. Array-friendly."""
        stage = self.instance.training.zero_stage
        total = 2.0 * BYTES_PER_VALUE + OPTIMIZER_STATE_BYTES  # weights, gradients, states
        sharded = (0.0, OPTIMIZER_STATE_BYTES, OPTIMIZER_STATE_BYTES + BYTES_PER_VALUE,
                   total)[stage]
        return ((total - sharded) + sharded / dp) / t

    def edge_params(self, first, last):
        """Parameters of the embedding / LM head carried by a stage. Array-friendly."""
        return first * self.embedding_params + last * self.head_params

    def stage_memory_bytes(self, layers, in_flight, state_per_param, act_per_layer,
                           workspace, logits, first, last):
        """Per-GPU bytes of a stage: model states + in-flight activations + workspaces.

        Affine in ``layers`` for a fixed position (``in_flight = min(m, position + 1)``).
        Every argument may be a numpy array (batched path) or a float (MILP coefficients).
        """
        params = layers * self.layer_params + self.edge_params(first, last)
        return (params * state_per_param + layers * act_per_layer * in_flight
                + workspace + last * logits)

    # -- communication between stages --------------------------------------------------------
    def activation_bytes(self, b):
        """A: bytes of one micro-batch's boundary activation (b s h bf16). Array-friendly."""
        model = self.instance.model
        return b * float(model.seq_len * model.hidden * BYTES_PER_VALUE)

    def link_bandwidth(self, k_from, k_to):
        """Bytes/s between two stages' domains (intra-domain per-GPU bandwidth if equal).
        Array-friendly: ``k_from`` and ``k_to`` may be index arrays."""
        return self.bandwidth[k_from, k_to]

    def link_latency(self, k_from, k_to):
        """Seconds of one-way latency between two stages' domains. Array-friendly."""
        return self.latency[k_from, k_to]

    def boundary_bytes(self, b, dp, same_domain):
        """Bytes on the link per micro-batch and direction: over the WAN the dp replicas'
        pipelines share one inter-domain link; inside a domain each replica has its own NICs."""
        return self.activation_bytes(b) * np.where(same_domain, 1, dp)

    def _drains(self, k_from, k_to, b, dp):
        """(forward, backward) seconds a micro-batch's bytes occupy each direction of a
        boundary's link: activations cross ``k_from -> k_to``, gradients ``k_to -> k_from``,
        the same bytes each, each direction its own channel at its own bandwidth."""
        size = self.boundary_bytes(b, dp, k_from == k_to)
        return size / self.link_bandwidth(k_from, k_to), size / self.link_bandwidth(k_to, k_from)

    def boundary_link_terms(self, k_from, k_to, b, dp):
        """(occupancy, delta) of a boundary, from one look-up of its two directions:

        * occupancy: seconds the busier direction is busy per micro-batch (a lower bound on P);
        * delta: the mean of a micro-batch's two crossings, ``A / B + L`` on each direction
          (activations forward, gradients backward), so that the two take ``2 delta`` (SPEC
          3.1); equal to ``A / B + L`` on a symmetric link, to the last bit."""
        return self.occupancy_and_delay(*self.boundary_directions(k_from, k_to, b, dp))

    @staticmethod
    def occupancy_and_delay(forward, backward, latency_forward, latency_backward):
        """(occupancy, delta) of :meth:`boundary_link_terms` from a boundary's directions
        (:meth:`boundary_directions`)."""
        delay = ((forward + latency_forward)  # paired so that a symmetric
                 + (backward + latency_backward)) / 2  # link gives 2x / 2 = x
        return np.maximum(forward, backward), delay

    def boundary_directions(self, k_from, k_to, b, dp):
        """(drain forward, drain backward, latency forward, latency backward) of a boundary:
        each direction apart, as the event simulation and the interleaved schedule graph
        (:mod:`formulation.schedule_graph`) take them."""
        forward, backward = self._drains(k_from, k_to, b, dp)
        return forward, backward, self.link_latency(k_from, k_to), self.link_latency(k_to, k_from)

    def boundary_occupancy(self, k_from, k_to, b, dp):
        """Occupancy of :meth:`boundary_link_terms`."""
        return self.boundary_link_terms(k_from, k_to, b, dp)[0]

    def boundary_delay(self, k_from, k_to, b, dp):
        """delta of :meth:`boundary_link_terms`."""
        return self.boundary_link_terms(k_from, k_to, b, dp)[1]

    def boundary_price(self, k_from, k_to):
        """USD per GB of a boundary's traffic: the mean of the two directions' prices (the
        same GB cross each way). Array-friendly."""
        return (self.price[k_from, k_to] + self.price[k_to, k_from]) / 2

    def boundary_traffic_gb(self, k_from, k_to, b, dp, m):
        """GB crossing a WAN boundary per step: activations forward, gradients backward."""
        wan = k_from != k_to
        return np.where(wan, 2.0 * m * self.boundary_bytes(b, dp, False) / GB, 0.0)

    def boundary_cost(self, k_from, k_to, b, dp, m):
        """USD per step for the boundary: 2 m r A p_ij (SPEC section 4). Array-friendly."""
        return self.boundary_traffic_gb(k_from, k_to, b, dp, m) * self.boundary_price(k_from, k_to)

    # -- data-parallel all-reduce and optimizer ---------------------------------------------
    def allreduce_coefficients(self, domain, t, dp, micro_batches=1):
        """(seconds per parameter, fixed seconds) of a stage's data-parallel communication in
        one step, a ring over its dp replicas inside the domain. ZeRO 0-2: the gradient
        all-reduce (or reduce-scatter and all-gather, the same bytes), ``2 (r-1)/r`` of the
        stage's bf16 gradients and ``2 (r-1)`` latency steps. ZeRO-3 gathers the weights
        before each micro-batch's forward and backward and reduce-scatters its gradients:
        ``3 m (r-1)/r`` and ``3 m (r-1)`` steps. Less the share ``training.dp_overlap``
        hidden behind the backward. The ring runs on NVLink when all replicas fit in one
        node, else on min(domain, NIC) bandwidth. Array-friendly."""
        network = (np.minimum(self.intra_bandwidth[domain], self.instance.gpu.nic_gbps * GBIT)
                   * self.eff.collective_efficiency)
        bandwidth = np.where(dp * t <= self.instance.gpu.gpus_per_node, self.nvlink_bw, network)
        passes = 3 * micro_batches / 2 if self.instance.training.zero_stage == 3 else 1.0
        exposed = (1 - self.instance.training.dp_overlap) * passes
        per_param = exposed * 2 * (dp - 1) / dp * BYTES_PER_VALUE / t / bandwidth
        return per_param, exposed * 2 * (dp - 1) * self.intra_latency[domain]

    def allreduce_time(self, domain, params, t, dp, micro_batches=1):
        """Seconds of a stage's data-parallel communication in one step (affine in its
        parameters). Array-friendly."""
        per_param, fixed = self.allreduce_coefficients(domain, t, dp, micro_batches)
        return per_param * params + fixed

    # -- scalar, memoised forms for the single-plan evaluator -----------------------------
    @_cached
    def stage_terms(self, b: int, t: int, recompute: str, dp: int, first: bool, last: bool,
                    domain: int) -> tuple[float, ...]:
        """A stage's coefficients in one memoised call for the single-plan evaluator's
        loop, each term affine in the stage's layers (``per_layer * layers + fixed``):
        (compute per layer, edge compute, memory bytes per layer, activation bytes per layer
        and micro-batch in flight, fixed memory bytes, data-parallel seconds per layer and
        fixed, optimizer seconds per layer and fixed, recompute FLOPs per layer and
        sequence). Derived from the array-friendly functions above, so the two paths
        cannot drift apart."""
        m = self.instance.training.global_batch / (dp * b)
        state = self.state_bytes_per_param(t, dp)
        activation = self.layer_activation_bytes(b, t, recompute)
        workspace, logits = self.workspace_bytes(b, t, recompute), self.logits_bytes(b, t)

        def memory(layers, in_flight):
            return self.stage_memory_bytes(layers, in_flight, state, activation, workspace,
                                           logits, first, last)

        memory_fixed = memory(0, 0)
        per_param, allreduce_fixed = self.allreduce_coefficients(domain, t, dp, m)
        edge_params = self.edge_params(first, last)
        return (self.layer_compute_time(b, t, recompute),
                self.edge_compute_time(b, t, first, last),
                memory(1, 0) - memory_fixed, memory(1, 1) - memory(1, 0), memory_fixed,
                float(per_param * self.layer_params),
                float(per_param * edge_params + allreduce_fixed),
                self.optimizer_time(self.layer_params, t, dp),
                self.optimizer_time(edge_params, t, dp),
                self.recompute_flops_per_layer(1, recompute))

    @_cached
    def boundary_terms(self, k_from: int, k_to: int, b: int, dp: int) -> tuple[float, ...]:
        """(occupancy, delay, WAN GB per micro-batch round trip, price per GB) of a boundary."""
        occupancy, delay = self.boundary_link_terms(k_from, k_to, b, dp)
        return (float(occupancy), float(delay),
                float(self.boundary_traffic_gb(k_from, k_to, b, dp, 1.0)),
                float(self.boundary_price(k_from, k_to)) if k_from != k_to else 0.0)

    def optimizer_time(self, params, t, dp):
        """Adam step on a GPU's shard (ZeRO 1-3 shard it over dp). Array-friendly."""
        shards = dp if self.instance.training.zero_stage >= 1 else 1
        return params * self.eff.optimizer_bytes_per_param / (t * shards) / self.hbm_bw
