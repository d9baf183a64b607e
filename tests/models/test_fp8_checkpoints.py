"""FP8 block-scaled checkpoints (DeepSeek-V3 / Qwen3-FP8 format) against transformers running the
DEQUANTIZED weights: the reader's block arithmetic on its own, whole models single-rank (weights
dequantized at load, as the cpu and torch sets do, and kept FP8 as a set with FP8 kernels gets
them), and --tp 2 / --ep 2 layouts whose shards cut through scale blocks."""

from __future__ import annotations

import json
import random

import pytest
import torch
from fp8_models import dequantize_blocks, make_fp8_checkpoint, quantize_blocks
from safetensors.torch import save_file
from test_model_parity import Seqs, hf_logits, rel_err
from tiny_models import hf_greedy

from moeserve.config import CacheConfig, DeviceConfig, EngineConfig, ModelConfig
from moeserve.core.step_plan import GroupBatch
from moeserve.engine.model_runner import ModelRunner
from moeserve.kernels import registry
from moeserve.kernels.base import KernelSet
from moeserve.kernels.reference.fp8 import FP8_DTYPE
from moeserve.models.checkpoint import CheckpointError
from moeserve.models.quant_fp8 import Fp8CheckpointReader
from moeserve.models.quantization import Fp8BlockQuant
from moeserve.parallel_state import SINGLE

TOL = 1e-4
PROMPT = [5, 17, 33, 2, 90, 41, 7, 64, 12, 3, 88]


class Fp8ReferenceKernels(KernelSet):
    """The torch set, told it runs FP8 weights: layers keep them and the reference dequantizes per
    call (kernels/base.py) - what a set with FP8 kernels gets from the loader."""

    name = "fp8-reference"
    fp8_block_weights = True


def use_fp8_reference_set() -> str:
    registry.KERNEL_SETS.setdefault(Fp8ReferenceKernels.name, f"{__name__}:Fp8ReferenceKernels")
    return Fp8ReferenceKernels.name


def runner(path, kernels: str = "auto", ctx=SINGLE) -> ModelRunner:
    cfg = EngineConfig(model=ModelConfig(model=str(path)), cache=CacheConfig(block_size=4, num_blocks=32),
                       device=DeviceConfig(kernels=kernels))
    return ModelRunner(cfg, ctx)


def greedy_logits(r: ModelRunner, prompt: list[int], steps: int) -> list[torch.Tensor]:
    """Prefill in two chunks, then `steps` greedy decodes -> each step's last-token logits."""
    seqs, toks, out = Seqs(), list(prompt), []
    half = len(prompt) // 2
    for lo, hi in ((0, half), (half, len(prompt))):
        out.append(r.execute(GroupBatch(0, [seqs.chunk("a", toks, lo, hi)]))[0])
    for _ in range(steps):
        toks.append(int(out[-1].argmax()))
        out.append(r.execute(GroupBatch(0, [seqs.chunk("a", toks, len(toks) - 1, len(toks))]))[0])
    return out


def check_against(hf, logits: list[torch.Tensor], prompt: list[int]) -> None:
    toks = list(prompt)
    want_all = hf_logits(hf, toks + [int(x.argmax()) for x in logits[1:-1]])
    positions = [len(prompt) // 2 - 1] + list(range(len(prompt) - 1, want_all.shape[0]))
    for got, pos in zip(logits, positions):
        want = want_all[pos]
        assert rel_err(got, want) <= TOL
        assert int(got.argmax()) == int(want.argmax())


# -- the reader's arithmetic -------------------------------------------------------------------------
def _write(tmp_path, tensors: dict, block=(8, 8)) -> tuple[Fp8CheckpointReader, dict]:
    on_disk, want = {}, {}
    for name, w in tensors.items():
        if w.dim() == 3:
            qs = [quantize_blocks(w[e], block) for e in range(w.shape[0])]
            on_disk[name] = torch.stack([q for q, _ in qs])
            on_disk[name + "_scale_inv"] = torch.stack([s for _, s in qs])
            want[name] = torch.stack([dequantize_blocks(q, s, block) for q, s in qs])
        else:
            q, s = quantize_blocks(w, block)
            on_disk[name], on_disk[name + "_scale_inv"] = q, s
            want[name] = dequantize_blocks(q, s, block)
    on_disk["norm.weight"] = want["norm.weight"] = torch.ones(5)
    save_file(on_disk, str(tmp_path / "model.safetensors"))
    return Fp8CheckpointReader(tmp_path, Fp8BlockQuant(block), keep=True, progress=False), want


def test_reader_dequantizes_any_slice_through_partial_and_cut_blocks(tmp_path):
    g = torch.Generator().manual_seed(0)
    reader, want = _write(tmp_path, {"a.weight": torch.randn(37, 21, generator=g),
                                     "e.weight": torch.randn(3, 20, 13, generator=g)})
    w = want["a.weight"]
    torch.testing.assert_close(reader.read("a.weight"), w, rtol=0, atol=0)
    for lo, hi in ((0, 8), (3, 19), (12, 37), (36, 37)):
        torch.testing.assert_close(reader.read("a.weight", 0, lo, hi), w[lo:hi], rtol=0, atol=0)
    for lo, hi in ((0, 21), (5, 11), (16, 21)):
        torch.testing.assert_close(reader.read("a.weight", 1, lo, hi), w[:, lo:hi], rtol=0, atol=0)
    e = want["e.weight"]
    for index in ((1, slice(3, 17), slice(None)), (2, slice(None), slice(6, 13)), (0, 5, slice(2, 9)), (1, 19, 12)):
        torch.testing.assert_close(reader.read_index("e.weight", index), e[index], rtol=0, atol=0)
    assert reader.read("norm.weight").tolist() == [1.0] * 5  # a plain tensor reads as it is
    reader.finish()  # the scales were claimed with their weights


def test_reader_keeps_block_aligned_shards_and_refuses_cut_ones(tmp_path):
    g = torch.Generator().manual_seed(1)
    reader, want = _write(tmp_path, {"a.weight": torch.randn(37, 21, generator=g),
                                     "e.weight": torch.randn(3, 20, 13, generator=g)})
    assert reader.fp8_keepable("a.weight", 0, 16) and not reader.fp8_keepable("a.weight", 0, 12)
    assert reader.fp8_keepable("a.weight", 1, 8) and not reader.fp8_keepable("a.weight", 1, 4)
    assert not reader.fp8_keepable("norm.weight")
    shard = reader.read_fp8("a.weight", 0, 16, 37)
    assert shard.data.dtype == FP8_DTYPE and tuple(shard.scale_inv.shape) == (3, 3)
    torch.testing.assert_close(shard.dequantize(), want["a.weight"][16:], rtol=0, atol=0)
    cols = reader.read_fp8("a.weight", 1, 8, 21)
    torch.testing.assert_close(cols.dequantize(), want["a.weight"][:, 8:], rtol=0, atol=0)
    expert = reader.read_fp8("e.weight", 0, 8, 20, expert=2)
    torch.testing.assert_close(expert.dequantize(), want["e.weight"][2, 8:], rtol=0, atol=0)


def test_reader_names_what_it_cannot_read(tmp_path):
    q, _ = quantize_blocks(torch.randn(9, 9), (8, 8))
    save_file({"a.weight": q, "b.weight": q.clone(), "b.weight_scale_inv": torch.ones(1, 1)}, str(tmp_path / "m.safetensors"))
    reader = Fp8CheckpointReader(tmp_path, Fp8BlockQuant((8, 8)), progress=False)
    with pytest.raises(CheckpointError, match="a.weight is float8 but has no a.weight_scale_inv"):
        reader.read("a.weight")
    with pytest.raises(CheckpointError, match=r"b.weight_scale_inv has shape \(1, 1\).*needs \(2, 2\)"):
        reader.read("b.weight")


@pytest.mark.parametrize("quant,match", [
    ({"quant_method": "fp8", "activation_scheme": "static"}, "without weight_block_size"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "two positive integers"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "e5m2"}, "fmt 'e5m2'"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "float8_e4m3fn", "ignored_layers": ["x"]}, None),
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "static"}, "activation_scheme"),
    ({"quant_method": "awq"}, "quant_method 'awq' is not supported"),
    # TypeError tracebacks before (vars() of a string or a number, `*` of an int)
    ("fp8", "quantization_config must be an object"),
    (5, "quantization_config must be an object"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": 5}, "must be a list of module names"),
])
def test_quantization_configs_moeserve_cannot_load_are_named_and_the_rest_pass(quant, match):
    from types import SimpleNamespace

    from moeserve.errors import ConfigError
    from moeserve.models.quantization import check_quantization

    if match is None:  # loadable
        check_quantization(SimpleNamespace(quantization_config=quant))
        return
    with pytest.raises(ConfigError, match=match):
        check_quantization(SimpleNamespace(quantization_config=quant))


# -- whole models, one rank ----------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["deepseek_v3", "qwen3_moe"])
def fp8_model(request, tmp_path_factory):
    hf, path = make_fp8_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, hf, path


def test_fp8_checkpoint_dequantized_at_load_matches_transformers(fp8_model, caplog):
    _, hf, path = fp8_model
    with caplog.at_level("DEBUG", logger="moeserve.engine.model_runner"):  # each rank's weight bytes: debug
        r = runner(path, "torch")  # the cpu set loads the same way (the slow layout tests run it)
    assert not any(p.dtype == FP8_DTYPE for p in r.model.parameters())
    assert "FP8 weights dequantized to float32 at load (the kernel set has no FP8 kernels)" in caplog.text
    assert f"weights of rank 0 (tp rank 0 of 1, ep rank 0 of 1): {r.weight_bytes / 2**20:.1f} MiB" in caplog.text
    check_against(hf, greedy_logits(r, PROMPT, 4), PROMPT)


def test_fp8_fused_expert_layout_matches_transformers(tmp_path):
    """The fused 3D layout (transformers' in-memory names) in FP8: experts read dequantized per slice."""
    from fp8_models import make_fp8_fused_checkpoint

    hf, path = make_fp8_fused_checkpoint("qwen3_moe", tmp_path)
    check_against(hf, greedy_logits(runner(path, "torch"), PROMPT, 3), PROMPT)


@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe", "olmoe", pytest.param("glm4_moe", marks=pytest.mark.slow),
                                  pytest.param("minimax_m2", marks=pytest.mark.slow)])
def test_fp8_checkpoints_of_the_other_architectures_match_transformers(arch, tmp_path):
    hf, path = make_fp8_checkpoint(arch, tmp_path)
    check_against(hf, greedy_logits(runner(path, "torch"), PROMPT, 3), PROMPT)


def test_fp8_weights_kept_for_fp8_kernels_match_transformers(tmp_path):
    """Block 8x8: every size is a multiple of 8, so one rank keeps nearly everything FP8 (all but MLA's
    kv_b_proj, which the absorbed path reads dequantized)."""
    hf, path = make_fp8_checkpoint("deepseek_v3", tmp_path, block=(8, 8))
    kept = runner(path, use_fp8_reference_set())
    dequantized = runner(path, "torch")
    fp8 = {n for n, p in kept.model.named_parameters() if p.dtype == FP8_DTYPE}
    assert "layers.1.mlp.experts.w13" in fp8 and "layers.0.self_attn.q_b_proj.weight" in fp8
    assert "layers.0.self_attn.kv_b_proj.weight" not in fp8
    assert kept.weight_bytes < 0.5 * dequantized.weight_bytes  # fp8 + fp32 scales per 8x8 block vs fp32
    check_against(hf, greedy_logits(kept, PROMPT, 4), PROMPT)


# -- layouts: the shards cut through scale blocks --------------------------------------------------------
PARAMS_KW = dict(temperature=0.0, max_tokens=8, ignore_eos=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("fp8_model,ep,tp", [("deepseek_v3", 1, 2), ("deepseek_v3", 2, 1), ("deepseek_v3", 2, 2),
                                             ("qwen3_moe", 1, 2), ("qwen3_moe", 2, 1)], indirect=["fp8_model"])
def test_fp8_layouts_give_transformers_greedy_tokens(fp8_model, ep, tp):
    from moeserve import LLM, SamplingParams

    _, hf, path = fp8_model
    rng = random.Random(4)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (3, 11, 19)]
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=16, ep=ep, tp=tp)
    try:
        got = [o.token_ids for o in llm.generate(prompts, SamplingParams(**PARAMS_KW))]
    finally:
        llm.shutdown()
    assert got == hf_greedy(hf, prompts, PARAMS_KW["max_tokens"])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("ep,tp", [(1, 2), (2, 1)])
def test_fp8_weights_kept_under_layouts_match_transformers(tmp_path, ep, tp):
    """Kept FP8 at --tp 2 keeps the shards that start on a block boundary and dequantizes those cut
    through a block (experts of 72 rows split at 36 with 8-row blocks), and the tokens do not change."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
    from spawn_world import run_world

    hf, path = make_fp8_checkpoint("deepseek_v3", tmp_path, block=(8, 8))
    results = run_world(_KeptRank(str(path), ep, tp), world=2, timeout_s=300)
    check_against(hf, [torch.tensor(x) for x in results[0]["logits"]], PROMPT)
    assert results[0]["logits"] == results[1]["logits"]
    assert all(r["fp8"] for r in results)


class _KeptRank:
    """One rank of a 2-rank world: a ModelRunner on the FP8-keeping set, the same prompt on both ranks."""

    def __init__(self, path: str, ep: int, tp: int):
        self.path, self.ep, self.tp = path, ep, tp

    def __call__(self, rank: int, world: int) -> dict:
        import torch.distributed as dist

        from moeserve.dispatch.a2a import A2ADispatcher
        from moeserve.parallel_state import ParallelContext

        if self.tp > 1:
            ctx, dispatcher = ParallelContext(tp_size=world, tp_rank=rank, tp_group=dist.group.WORLD), None
        else:
            ctx = ParallelContext(ep_size=world, ep_rank=rank, ep_group=dist.group.WORLD)
            dispatcher = A2ADispatcher(json.loads(open(f"{self.path}/config.json").read())["n_routed_experts"], ctx)
        cfg = EngineConfig(model=ModelConfig(model=self.path), cache=CacheConfig(block_size=4, num_blocks=32),
                           device=DeviceConfig(kernels=use_fp8_reference_set()))
        r = ModelRunner(cfg, ctx, dispatcher)
        logits = greedy_logits(r, PROMPT, 3)
        fp8 = [n for n, p in r.model.named_parameters() if p.dtype == FP8_DTYPE]
        return {"logits": [x.tolist() for x in logits], "fp8": fp8}


@pytest.mark.gpu
@pytest.mark.parametrize("kernels,dtype,tol", [("torch", "float32", TOL), ("fp8-reference", "float32", TOL),
                                                ("triton", "bfloat16", 3e-2)])
def test_fp8_checkpoint_on_a_gpu(tmp_path, kernels, dtype, tol):
    """On CUDA: a set without FP8 kernels (torch, triton) gets the weights dequantized to --dtype; the
    FP8-keeping set holds float8 weights and their scales on the device; all match transformers on the
    dequantized weights (bf16 within its rounding)."""
    hf, path = make_fp8_checkpoint("deepseek_v3", tmp_path, block=(8, 8))
    if kernels == "fp8-reference":
        use_fp8_reference_set()
    cfg = EngineConfig(model=ModelConfig(model=str(path), dtype=dtype), cache=CacheConfig(block_size=4, num_blocks=32),
                       device=DeviceConfig(device="cuda", kernels=kernels))
    r = ModelRunner(cfg, SINGLE)
    fp8 = [p for p in r.model.parameters() if p.dtype == FP8_DTYPE]
    assert bool(fp8) == (kernels == "fp8-reference") and all(p.is_cuda for p in r.model.parameters())
    seqs = Seqs()
    got = r.execute(GroupBatch(0, [seqs.chunk("a", PROMPT, 0, len(PROMPT))]))[0].float().cpu()
    want = hf_logits(hf, PROMPT)[-1]
    assert rel_err(got, want) <= tol


def test_moving_fp8_experts_between_slots_moves_their_scales(tmp_path):
    """The rebalancer copies an expert as one byte row of every slot tensor (engine/rebalance.py): FP8
    experts arrive with their scale blocks, bit for bit."""
    from types import SimpleNamespace

    from moeserve.engine.rebalance import RankPlacement
    from moeserve.kernels.reference.fp8 import Fp8Block
    from moeserve.moe.experts import GroupedExperts
    from moeserve.placement.rebalancer import Transfer

    g = torch.Generator().manual_seed(3)
    experts = GroupedExperts(3, hidden=24, intermediate=16, dtype=torch.float32)

    def block(rows: int, cols: int) -> Fp8Block:
        q, s = quantize_blocks(torch.randn(rows, cols, generator=g), (8, 8))
        return Fp8Block(q, s, (8, 8))

    for slot in range(3):
        experts.set_slot_fp8(slot, block(16, 24), block(16, 24), block(24, 16))
    before = [t.clone() for t in experts.slot_tensors()]
    assert [t.dtype for t in before] == [torch.float32, torch.float32, FP8_DTYPE, FP8_DTYPE]
    moe = SimpleNamespace(experts=experts, slots_per_rank=3, first_slot=0)
    RankPlacement([], SINGLE)._move_layer(moe, [Transfer(dst=0, src=2), Transfer(dst=2, src=0)])
    for old, new in zip(before, experts.slot_tensors()):
        assert torch.equal(new[0].view(torch.uint8), old[2].view(torch.uint8))
        assert torch.equal(new[2].view(torch.uint8), old[0].view(torch.uint8))
        assert torch.equal(new[1].view(torch.uint8), old[1].view(torch.uint8))
