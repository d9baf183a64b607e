"""DeepSeek-V2/V3 end to end against transformers: prefill, chunked prefill and decode in mixed batches.

Tiny random fp32 models are saved with save_pretrained and loaded through the checkpoint reader;
logits at every new token must match transformers' forward over the same prefix (rel err <= 1e-4).
"""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import hf_greedy, save_checkpoint

from moeserve.config import CacheConfig, EngineConfig, ModelConfig
from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.dense.attention_metadata import build_attention_metadata
from moeserve.engine.model_runner import ModelRunner
from moeserve.parallel_state import SINGLE, ParallelContext

pytestmark = pytest.mark.slow  # spawns ranks, servers or builds: left out of the quick run

YARN = {
    "type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 32,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 0.707,
    "mscale_all_dim": 1.0,
}
COMMON = dict(
    vocab_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=4,
    kv_lora_rank=12,
    qk_nope_head_dim=10,
    qk_rope_head_dim=6,
    v_head_dim=8,
    max_position_embeddings=128,
    initializer_range=0.07,
    n_shared_experts=1,
    first_k_dense_replace=1,
    intermediate_size=40,
)
CONFIGS = {
    # V2, direct q_proj, greedy softmax routing, odd hidden size (per-expert loop, no grouped_mm)
    "v2-greedy": (
        "v2",
        dict(
            hidden_size=36,
            moe_intermediate_size=10,
            n_routed_experts=8,
            num_experts_per_tok=2,
            q_lora_rank=None,
            topk_method="greedy",
            routed_scaling_factor=1.0,
        ),
    ),
    # V2, q LoRA, group-limited greedy, YaRN, 2 shared experts, scaled weights, attention biases
    "v2-groups": (
        "v2",
        dict(
            hidden_size=32,
            moe_intermediate_size=8,
            n_routed_experts=12,
            num_experts_per_tok=3,
            attention_bias=True,
            q_lora_rank=16,
            topk_method="group_limited_greedy",
            n_group=4,
            topk_group=2,
            routed_scaling_factor=1.5,
            n_shared_experts=2,
            rope_scaling=YARN,
        ),
    ),
    # V3: sigmoid + random bias, 4 groups / keep 2, scaling 2.5, YaRN, interleaved rope (grouped_mm shapes)
    "v3": (
        "v3",
        dict(
            hidden_size=32,
            moe_intermediate_size=8,
            n_routed_experts=16,
            num_experts_per_tok=4,
            q_lora_rank=16,
            n_group=4,
            topk_group=2,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
            rope_scaling=YARN,
        ),
    ),
    # V3 variant: no rope interleave, no q LoRA, unnormalised weights, 2 groups keep 1
    "v3-half": (
        "v3",
        dict(
            hidden_size=40,
            moe_intermediate_size=12,
            n_routed_experts=8,
            num_experts_per_tok=3,
            q_lora_rank=None,
            n_group=2,
            topk_group=1,
            routed_scaling_factor=0.8,
            norm_topk_prob=False,
            rope_interleave=False,
        ),
    ),
}


def _make_checkpoint(name: str, path, layout: str = "per_expert") -> torch.nn.Module:
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

    version, kw = CONFIGS[name]
    torch.manual_seed(sum(map(ord, name)))
    cfg = (DeepseekV2Config if version == "v2" else DeepseekV3Config)(**(COMMON | kw))
    # the plain loops are the oracle: transformers' default grouped_mm rejects unaligned tiny shapes
    cfg._attn_implementation, cfg._experts_implementation = "eager", "eager"
    model_cls = DeepseekV2ForCausalLM if version == "v2" else DeepseekV3ForCausalLM
    cfg.architectures = [model_cls.__name__]  # the fused layout writes config.json itself
    model = model_cls(cfg)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1 and "norm" in pname:
                p.uniform_(0.6, 1.4)  # norms start at ones: make them matter
        for layer in model.model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None and hasattr(gate, "e_score_correction_bias"):
                gate.e_score_correction_bias.normal_(0, 0.3)
    save_checkpoint(model, path, layout)
    return model.eval()


class Harness:
    """The ModelRunner plus disjoint block tables per request, as a block manager would hand out."""

    def __init__(self, path, block_size: int = 4, num_blocks: int = 64, ctx: ParallelContext = SINGLE, dispatcher=None):
        cache = CacheConfig(block_size=block_size, num_blocks=num_blocks)
        self.runner = ModelRunner(EngineConfig(model=ModelConfig(model=str(path)), cache=cache), ctx, dispatcher)
        self.block_size = block_size
        self.next_block = 1  # block 0 stays unused so a stray write to slot 0 shows up
        self.tables: dict[str, list[int]] = {}

    def batch(self, chunks: list[tuple[str, list[int], int]]) -> GroupBatch:
        """chunks: (request id, new token ids, start position)."""
        seqs = []
        for rid, ids, start in chunks:
            table = self.tables.setdefault(rid, [])
            while len(table) * self.block_size < start + len(ids):
                table.append(self.next_block)
                self.next_block += 1
            seqs.append(ScheduledSeq(rid, ids, start, list(table), True))
        return GroupBatch(0, seqs)

    def step(self, chunks: list[tuple[str, list[int], int]]) -> torch.Tensor:
        """-> logits [len(chunks), V] of each chunk's last token, through ModelRunner.execute."""
        return self.runner.execute(self.batch(chunks))

    def step_all_positions(self, chunks: list[tuple[str, list[int], int]]) -> list[torch.Tensor]:
        """-> logits [len(new), V] per chunk: every new token, through the model contract directly."""
        meta = build_attention_metadata(self.batch(chunks), self.block_size)
        model = self.runner.model
        with torch.no_grad():
            logits = model.compute_logits(model(meta, self.runner.kv_caches))
        return list(logits.split([len(ids) for _, ids, _ in chunks]))


def _hf_logits(hf, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0]


def _assert_close(got: torch.Tensor, want: torch.Tensor) -> None:
    rel = (got - want).norm() / want.norm()
    assert rel <= 1e-4, f"relative error {rel:.2e}"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    hf = _make_checkpoint(request.param, path)
    return hf, path


def test_cache_holds_only_latent_and_rope_key(pair):
    hf, path = pair
    h = Harness(path, block_size=4, num_blocks=8)
    assert type(h.runner.model).__name__ == hf.config.architectures[0]
    c = hf.config
    caches = h.runner.kv_caches
    assert [tuple(t.shape) for t in caches[0]] == [(8, 4, c.kv_lora_rank + c.qk_rope_head_dim)]
    assert len(caches) == c.num_hidden_layers


def test_prefill_batch_matches_transformers(pair):
    hf, path = pair
    h = Harness(path)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, hf.config.vocab_size, (n,), generator=gen).tolist() for n in (7, 1, 13, 4)]
    outs = h.step_all_positions([(str(i), p, 0) for i, p in enumerate(prompts)])
    for p, got in zip(prompts, outs):
        _assert_close(got, _hf_logits(hf, p))
    again = Harness(path).step([(str(i), p, 0) for i, p in enumerate(prompts)])  # sampled rows only
    _assert_close(again, torch.stack([_hf_logits(hf, p)[-1] for p in prompts]))


def test_chunked_prefill_and_decode_mixed(pair):
    hf, path = pair
    h = Harness(path)
    gen = torch.Generator().manual_seed(2)
    seq = {r: torch.randint(0, hf.config.vocab_size, (n,), generator=gen).tolist() for r, n in (("a", 11), ("b", 5))}
    done = {"a": 0, "b": 0}

    def run(plan: dict[str, int]) -> None:
        chunks = [(r, seq[r][done[r] : done[r] + n], done[r]) for r, n in plan.items()]
        for (r, ids, start), got in zip(chunks, h.step(chunks)):
            want = _hf_logits(hf, seq[r][: start + len(ids)])[-1]
            _assert_close(got, want)
            assert int(got.argmax()) == int(want.argmax())  # greedy tokens identical
            done[r] += len(ids)
            if done[r] == len(seq[r]):
                seq[r].append(int(got.argmax()))  # greedy continuation, decoded next step

    run({"a": 6, "b": 5})  # a: first chunk, b: whole prompt
    run({"a": 5, "b": 1})  # a: rest of its prompt, b: decode
    for _ in range(3):
        run({"a": 1, "b": 1})  # both decode


def test_empty_batch_runs_and_returns_no_rows(pair):
    hf, path = pair
    assert Harness(path).runner.execute(GroupBatch(0, [])).shape == (0, hf.config.vocab_size)


def test_fused_expert_layout_and_extra_mtp_layer(tmp_path):
    """The fused 3D expert layout loads too; tensors of layers past num_hidden_layers (V3's MTP
    module on disk) are skipped without complaint."""
    from safetensors.torch import load_file, save_file

    hf = _make_checkpoint("v3", tmp_path, layout="fused")
    shard = min(tmp_path.glob("*.safetensors"))
    tensors = load_file(str(shard))
    tensors["model.layers.3.eh_proj.weight"] = torch.zeros(4, 4)
    save_file(tensors, str(shard), metadata={"format": "pt"})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(
        index.read_text().replace(
            '"weight_map": {', f'"weight_map": {{"model.layers.3.eh_proj.weight": "{shard.name}", '
        )
    )
    prompt = [4, 8, 15, 16, 23, 42]
    _assert_close(Harness(tmp_path).step([("a", prompt, 0)])[0], _hf_logits(hf, prompt)[-1])


def test_unsupported_configs_say_what_to_change():
    from transformers import DeepseekV3Config

    from moeserve.models.deepseek import DeepseekV3ForCausalLM

    cfg = DeepseekV3Config(**(COMMON | CONFIGS["v3"][1] | {"rope_scaling": {"type": "linear", "factor": 2.0}}))
    with pytest.raises(ValueError, match="valid: default, yarn"):
        DeepseekV3ForCausalLM(cfg, SINGLE, torch.float32)


def test_dense_and_moe_layer_pattern():
    """first_k_dense_replace dense layers, then MoE every moe_layer_freq layers (DeepSeek's own rule)."""
    from transformers import DeepseekV2Config

    from moeserve.models.deepseek import DeepseekV2ForCausalLM
    from moeserve.moe.layer import MoELayer

    cfg = DeepseekV2Config(**(COMMON | CONFIGS["v2-greedy"][1] | {"num_hidden_layers": 6}))
    cfg.moe_layer_freq = 2
    model = DeepseekV2ForCausalLM(cfg, SINGLE, torch.float32)
    assert [isinstance(layer.mlp, MoELayer) for layer in model.layers] == [False, False, True, False, True, False]
    assert model.kv_cache_shape(3, 4) == [(3, 4, cfg.kv_lora_rank + cfg.qk_rope_head_dim)]


def test_a_transformers_checkpoint_with_moe_layer_freq_is_read_as_transformers_wrote_it(tmp_path):
    # transformers ignores moe_layer_freq (every layer from first_k_dense_replace on is MoE) and saves
    # so; such a checkpoint used to fail to load ("no tensor model.layers.1.mlp.gate_proj.weight")
    from moeserve import LLM, SamplingParams

    hf = _make_checkpoint("v2-greedy", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(moe_layer_freq=2)
    (tmp_path / "config.json").write_text(json.dumps(config))
    prompt = [5, 9, 17, 3, 12]
    want = hf_greedy(hf, [prompt], 8)[0]
    llm = LLM(model=str(tmp_path), block_size=4, kv_cache_blocks=32)
    try:
        out = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))[0]
        assert out.token_ids == want
    finally:
        llm.shutdown()
