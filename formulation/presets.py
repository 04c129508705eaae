"""Published hardware and model specifications.

GPU figures are the vendors' datasheet values (dense bf16/fp16 tensor peak, without
sparsity). Model shapes are those of the published model cards / papers.
"""

from __future__ import annotations

from formulation.instance import GpuSpec, ModelSpec

GPUS: dict[str, GpuSpec] = {
    # NVIDIA A100 SXM4 80GB datasheet: 312 TFLOP/s bf16, 2039 GB/s HBM2e,
    # NVLink 3 600 GB/s total (300 GB/s per direction); DGX A100: 8 GPUs, 8 x 200 Gb/s HDR.
    "A100-80GB": GpuSpec(name="A100-80GB", peak_tflops=312.0, hbm_gb=80.0, hbm_gbps=2039.0,
                         nvlink_gbps=300.0, gpus_per_node=8, nic_gbps=200.0),
    # NVIDIA H100 SXM5 80GB datasheet: 989.4 TFLOP/s dense bf16, 3350 GB/s HBM3,
    # NVLink 4 900 GB/s total; DGX H100: 8 GPUs, 8 x 400 Gb/s NDR.
    "H100-80GB": GpuSpec(name="H100-80GB", peak_tflops=989.4, hbm_gb=80.0, hbm_gbps=3350.0,
                         nvlink_gbps=450.0, gpus_per_node=8, nic_gbps=400.0),
    # Huawei Ascend 910B (B3 bin): ~313 TFLOP/s fp16, 64 GB HBM2e at 1.6 TB/s,
    # HCCS 392 GB/s per NPU within an 8-NPU server, 200 Gb/s RoCE per NPU.
    "Ascend-910B": GpuSpec(name="Ascend-910B", peak_tflops=313.0, hbm_gb=64.0, hbm_gbps=1600.0,
                           nvlink_gbps=196.0, gpus_per_node=8, nic_gbps=200.0),
}


def _gpt(name: str, layers: int, hidden: int, heads: int) -> ModelSpec:
    """A GPT model of Megatron-LM SC'21 Table 1: FFN 4h, vocabulary 51200, sequence 2048."""
    return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=heads,
                     ffn=4 * hidden, vocab=51200, seq_len=2048, gated_mlp=False,
                     tied_embeddings=True)


MODELS: dict[str, ModelSpec] = {
    # Touvron et al. 2023 (LLaMA 2), Table/model cards: SwiGLU MLP, untied embeddings, 32k vocab.
    "llama2-7b": ModelSpec(name="llama2-7b", layers=32, hidden=4096, heads=32, kv_heads=32,
                           ffn=11008, vocab=32000, seq_len=4096, gated_mlp=True,
                           tied_embeddings=False),
    "llama2-13b": ModelSpec(name="llama2-13b", layers=40, hidden=5120, heads=40, kv_heads=40,
                            ffn=13824, vocab=32000, seq_len=4096, gated_mlp=True,
                            tied_embeddings=False),
    "llama2-70b": ModelSpec(name="llama2-70b", layers=80, hidden=8192, heads=64, kv_heads=8,
                            ffn=28672, vocab=32000, seq_len=4096, gated_mlp=True,
                            tied_embeddings=False),
    # Brown et al. 2020 (GPT-3), Table 2.1: 96 layers, d_model 12288, 96 heads, context 2048.
    "gpt3-175b": ModelSpec(name="gpt3-175b", layers=96, hidden=12288, heads=96, kv_heads=96,
                           ffn=49152, vocab=50257, seq_len=2048, gated_mlp=False,
                           tied_embeddings=True),
    # Llama 3 herd of models (2024), Table 3: 126 layers, 16384, 128 heads, 8 KV heads,
    # FFN 53248, vocabulary 128256, pre-training context 8192.
    "llama3-405b": ModelSpec(name="llama3-405b", layers=126, hidden=16384, heads=128, kv_heads=8,
                             ffn=53248, vocab=128256, seq_len=8192, gated_mlp=True,
                             tied_embeddings=False),
    # Narayanan et al. SC'21, Table 1 (GPT family used for weak scaling).
    "gpt-1.7b": _gpt("gpt-1.7b", 24, 2304, 24),
    "gpt-3.6b": _gpt("gpt-3.6b", 30, 3072, 32),
    "gpt-7.5b": _gpt("gpt-7.5b", 36, 4096, 32),
    "gpt-18b": _gpt("gpt-18b", 40, 6144, 48),
    "gpt-39b": _gpt("gpt-39b", 48, 8192, 64),
    "gpt-76b": _gpt("gpt-76b", 60, 10240, 80),
    "gpt-146b": _gpt("gpt-146b", 80, 12288, 96),
    "gpt-310b": _gpt("gpt-310b", 96, 16384, 128),
    "gpt-530b": _gpt("gpt-530b", 105, 20480, 128),
    "gpt-1t": _gpt("gpt-1t", 128, 25600, 160),
}

# Short names accepted on the command line.
MODEL_ALIASES = {"7b": "llama2-7b", "13b": "llama2-13b", "70b": "llama2-70b",
                 "175b": "gpt3-175b", "405b": "llama3-405b"}


def model_preset(name: str) -> ModelSpec:
    key = MODEL_ALIASES.get(name.lower(), name.lower())
    if key not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[key]


def gpu_preset(name: str) -> GpuSpec:
    for key, spec in GPUS.items():
        if key.lower() == name.lower():
            return spec
    raise KeyError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")
