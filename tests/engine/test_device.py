"""--device / --kernels: how `auto` resolves, the errors before any rank starts, the NCCL / gloo split
of the process groups, and (marked gpu, skipped without CUDA) a whole run on cuda:0 with every tensor
of the step on the device and the greedy tokens of transformers."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from moeserve.config import ConfigError, DeviceConfig, ParallelConfig
from moeserve.engine.launch_check import check_device
from moeserve.engine.process_groups import data_backend
from moeserve.kernels import registry
from moeserve.kernels.base import KernelSet

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")


def test_auto_picks_cuda_and_triton_on_a_gpu_and_cpu_sets_elsewhere(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert registry.resolve("auto", "auto") == ("cuda", "triton")
    assert registry.resolve("cpu", "auto") == ("cpu", "cpu")
    assert registry.resolve("auto", "torch") == ("cuda", "torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert registry.resolve("auto", "auto") == ("cpu", "cpu")
    assert registry.resolve("cuda", "auto") == ("cuda", "triton")


def test_bf16_is_the_default_dtype_on_gpus_only():
    assert registry.resolve_dtype("auto", "cuda") == torch.bfloat16
    assert registry.resolve_dtype("auto", "cpu") == torch.float32
    assert registry.resolve_dtype("float16", "cuda") == torch.float16


def test_each_rank_takes_the_gpu_of_its_local_rank():
    assert registry.rank_device("cuda", 3) == torch.device("cuda", 3)
    assert registry.rank_device("cpu", 3) == torch.device("cpu")


def test_data_groups_use_nccl_on_gpus_and_gloo_on_cpus():
    assert data_backend(ParallelConfig(), "cuda") == "nccl"
    assert data_backend(ParallelConfig(), "cpu") == "gloo"
    assert data_backend(ParallelConfig(backend="gloo"), "cuda") == "gloo"


def test_an_unknown_kernel_set_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid: torch, cpu, triton"):
        registry.make_kernel_set("cuda")
    with pytest.raises(ConfigError, match="choose one of auto, torch, cpu, triton"):
        DeviceConfig(kernels="onednn").validate()
    with pytest.raises(ConfigError, match="--device 'gpu' is not one of auto, cpu, cuda"):
        DeviceConfig(device="gpu").validate()
    with pytest.raises(ConfigError, match="gpu-memory-utilization"):
        DeviceConfig(gpu_memory_utilization=1.5).validate()
    assert type(registry.make_kernel_set("torch")) is KernelSet


@pytest.mark.slow
@no_cuda
def test_device_cuda_without_cuda_is_one_line_before_any_rank_starts():
    with pytest.raises(ConfigError, match="--device cuda needs a CUDA GPU"):
        check_device(DeviceConfig(device="cuda"))
    done = subprocess.run([sys.executable, "-m", "moeserve.cli", "serve", "--device", "cuda"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--device cuda needs a CUDA GPU" in done.stderr, done.stderr


@no_cuda
def test_llm_device_cuda_without_cuda_raises_before_loading():
    from moeserve import LLM

    with pytest.raises(ConfigError, match="--device cuda needs a CUDA GPU"):
        LLM(device="cuda")


def test_triton_needs_cuda_or_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: triton runs")
    with pytest.raises(ConfigError, match="--kernels triton needs"):
        check_device(DeviceConfig(device="cpu", kernels="triton"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if registry.kernels_available("triton"):
        check_device(DeviceConfig(device="cpu", kernels="triton"))


def test_the_cpu_set_refuses_another_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigError, match="--kernels cpu runs on --device cpu"):
        check_device(DeviceConfig(device="cuda", kernels="cpu"))


def test_metadata_stays_put_on_the_cpu():
    from moeserve.core.step_plan import GroupBatch, ScheduledSeq
    from moeserve.dense.attention_metadata import build_attention_metadata

    meta = build_attention_metadata(GroupBatch(0, [ScheduledSeq("a", [1, 2, 3], 0, [0], True)]), 4)
    assert meta.to(torch.device("cpu")) is meta


# ---- on a GPU ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("kernels", ["torch", "triton", "triton-fused-moe"])
def test_a_whole_run_on_the_gpu_matches_transformers(kernels, tmp_path, monkeypatch):
    """fp32 on cuda:0 (the oracle's dtype): weights, KV cache, metadata and logits on the device. The
    triton set takes cuBLAS's grouped GEMM for the experts on a GPU unless MOESERVE_TRITON_FUSED_MOE=1."""
    if kernels == "triton-fused-moe":
        kernels = "triton"
        monkeypatch.setenv("MOESERVE_TRITON_FUSED_MOE", "1")
    from moeserve import LLM, SamplingParams
    from tiny_models import make_checkpoint

    hf, path = make_checkpoint("mixtral", tmp_path)
    prompts = [[5, 17, 3, 9], list(range(3, 30))]
    hf.generation_config.eos_token_id = None
    want = [hf.generate(torch.tensor([p]), max_new_tokens=6, do_sample=False, pad_token_id=0)[0, len(p):].tolist()
            for p in prompts]
    llm = LLM(model=str(path), device="cuda", kernels=kernels, dtype="float32", block_size=4,
              max_num_batched_tokens=16)
    runner = llm.engine.executor.worker.runner
    assert runner.device == torch.device("cuda", 0)
    assert all(p.device == runner.device for p in runner.model.parameters())
    assert all(t.device == runner.device for layer in runner.kv_caches for t in layer)
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    llm.shutdown()
    assert [o.token_ids for o in outs] == want


@pytest.mark.gpu
def test_bf16_is_the_gpu_default_and_the_kv_cache_fits_the_free_memory(tmp_path):
    from moeserve import LLM, SamplingParams
    from tiny_models import make_checkpoint

    _, path = make_checkpoint("mixtral", tmp_path)
    llm = LLM(model=str(path), device="cuda", gpu_memory_utilization=0.5)
    runner = llm.engine.executor.worker.runner
    assert runner.dtype == torch.bfloat16 and runner.kv_caches[0][0].dtype == torch.bfloat16
    free, total = torch.cuda.mem_get_info(runner.device)
    kv = sum(t.numel() * t.element_size() for layer in runner.kv_caches for t in layer)
    assert kv <= 0.5 * total
    out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True))
    llm.shutdown()
    assert len(out[0].token_ids) == 3


@pytest.mark.gpu
def test_a_rank_on_cuda_joins_nccl_for_data_and_gloo_for_control():
    code = textwrap.dedent("""
        import socket, torch, torch.distributed as dist
        from moeserve.config import ParallelConfig
        from moeserve.engine.process_groups import RankEnv, broadcast_bytes, init_rank
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        groups = init_rank(RankEnv(0, 1, 0, "127.0.0.1", port), ParallelConfig(), "cuda")
        assert torch.cuda.current_device() == 0
        assert dist.get_backend() == "nccl"
        x = torch.ones(4, device="cuda")
        dist.all_reduce(x)
        assert dist.get_backend(groups.plan_group) == "gloo" and dist.get_backend(groups.result_group) == "gloo"
        assert broadcast_bytes(b"plan", groups.plan_group) == b"plan"
        dist.destroy_process_group()
        print("OK")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MOESERVE_GEMM_WARMUP_ROWS": "0"})
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_ranks_on_two_gpus_give_the_tokens_of_one(tmp_path):
    from moeserve import LLM, SamplingParams
    from tiny_models import make_checkpoint

    _, path = make_checkpoint("mixtral", tmp_path)
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    outs = {}
    for tp in (1, 2):
        llm = LLM(model=str(path), device="cuda", dtype="float32", tp=tp)
        outs[tp] = [o.token_ids for o in llm.generate([[5, 6, 7, 8], [9, 10]], params)]
        llm.shutdown()
    assert outs[1] == outs[2]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_shm_dispatch_on_two_gpu_ranks_gives_the_tokens_of_one(tmp_path):
    """GPU ranks (an NCCL ep group) over the host heap: the heap's set-up collectives run on the GPU,
    the rows are staged through host memory, and the tokens are those of one rank."""
    from moeserve import LLM, SamplingParams
    from tiny_models import make_checkpoint

    _, path = make_checkpoint("mixtral", tmp_path)
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    outs = {}
    for ep, dispatch in ((1, "auto"), (2, "shm")):
        llm = LLM(model=str(path), device="cuda", dtype="float32", ep=ep, dispatch=dispatch)
        outs[ep] = [o.token_ids for o in llm.generate([[5, 6, 7, 8], [9, 10]], params)]
        llm.shutdown()
    assert outs[1] == outs[2]
