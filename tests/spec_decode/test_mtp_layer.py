"""The MTP layer (models/mtp.py) against a plain-torch reference of DeepSeek-V3's MTP module around
transformers' decoder layer: the first pass over a prompt (main hidden states + next tokens) and
chained steps over the paged cache give the reference's logits."""
from __future__ import annotations

import pytest
import torch
from mtp_checkpoints import make_mtp_checkpoint

from moeserve.config import CacheConfig, EngineConfig, ModelConfig
from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.dense.attention_metadata import build_attention_metadata
from moeserve.engine.model_runner import ModelRunner
from moeserve.parallel_state import SINGLE
from moeserve.speculative_config import SpeculativeConfig

pytestmark = pytest.mark.slow  # builds DeepSeek models twice: left out of the quick run


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    rel = (got - want).norm() / want.norm()
    assert rel <= 1e-4, f"relative error {rel:.2e}"


def _runner(path, spec: SpeculativeConfig | None) -> ModelRunner:
    config = EngineConfig(model=ModelConfig(model=str(path)), cache=CacheConfig(block_size=4, num_blocks=32),
                          speculative=spec or SpeculativeConfig())
    return ModelRunner(config, SINGLE)


def _meta(ids: list[int], start: int, table: list[int]):
    return build_attention_metadata(GroupBatch(0, [ScheduledSeq("a", ids, start, table, True)]), 4)


@pytest.mark.parametrize("name, copy_head", [("v3", True), ("v3", False), ("glm4_moe", True)])
def test_first_pass_and_chain_match_the_reference(tmp_path, name, copy_head):
    hf, ref = make_mtp_checkpoint(tmp_path, name, copy_head=copy_head)
    runner = _runner(tmp_path, SpeculativeConfig("mtp", 3))
    model = runner.model
    assert len(runner.kv_caches) == hf.config.num_hidden_layers + 1  # the MTP layer's own cache
    assert ("head" in model.mtp._shared) == copy_head and "embed" in model.mtp._shared  # copies not kept twice
    ids = torch.randint(0, hf.config.vocab_size, (11,), generator=torch.Generator().manual_seed(3)).tolist()
    table = [1, 2, 3, 4]
    with torch.no_grad():
        meta = _meta(ids, 0, table)
        hidden = model(meta, runner.kv_caches)  # [11, H]
        main = ref.main_hidden(ids)
        _close(hidden, main)
        nxt = int(model.compute_logits(hidden[-1:]).argmax())
        g = model.mtp_forward(torch.tensor(ids[1:] + [nxt]), hidden, meta, runner.kv_caches)
        g_ref, logits_ref = ref(ids[1:] + [nxt], main)
        _close(model.mtp_logits(g), logits_ref)
        # chained: position 11 takes (g at 10, the draft just taken), over the paged MTP cache
        inputs, hiddens = ids[1:] + [nxt], main
        last_g, last_g_ref = g[-1:], g_ref[-1:]
        for pos in (11, 12):
            draft = int(model.mtp_logits(last_g).argmax())
            inputs, hiddens = inputs + [draft], torch.cat([hiddens, last_g_ref])
            last_g = model.mtp_forward(torch.tensor([draft]), last_g, _meta([draft], pos, table), runner.kv_caches)
            g_ref, logits_ref = ref(inputs, hiddens)
            last_g_ref = g_ref[-1:]
            _close(model.mtp_logits(last_g), logits_ref[-1:])


def test_the_drafter_proposes_the_reference_chain(tmp_path):
    """Through a Worker: a prompt's step drafts k tokens as the reference chains them; a verify step
    of those drafts then drafts again from the last accepted position, over the accepted sequence."""
    from moeserve.core.step_plan import NewRequest, StepPlan
    from moeserve.engine.worker import Worker
    from moeserve.sampling_params import SamplingParams

    hf, ref = make_mtp_checkpoint(tmp_path)
    config = EngineConfig(model=ModelConfig(model=str(tmp_path)), cache=CacheConfig(block_size=4, num_blocks=32),
                          speculative=SpeculativeConfig("mtp", 3))
    worker = Worker(config, SINGLE)
    ids = torch.randint(0, hf.config.vocab_size, (9,), generator=torch.Generator().manual_seed(4)).tolist()
    table = list(range(1, 9))

    def reference_drafts(seq: list[int]) -> list[int]:
        """The chain from the last position of `seq` (prompt + accepted tokens, the newest last)."""
        hidden = ref.main_hidden(seq[:-1])
        inputs, g_all, out = seq[1:], hidden, []
        g, logits = ref(inputs, g_all)
        for _ in range(3):
            out.append(int(logits[-1].argmax()))
            inputs, g_all = inputs + [out[-1]], torch.cat([g_all, g[-1:]])
            g, logits = ref(inputs, g_all)
        return out

    new = NewRequest("a", SamplingParams(temperature=0.0))
    first = worker.execute(StepPlan(0, [GroupBatch(0, [ScheduledSeq("a", ids, 0, table, True)])], [new]))
    seq = ids + [first.sampled[0].token_id]
    assert first.drafts["a"] == reference_drafts(seq)
    drafts = first.drafts["a"]
    verify = ScheduledSeq("a", [seq[-1]] + drafts, len(seq) - 1, table, True, num_drafts=len(drafts))
    second = worker.execute(StepPlan(1, [GroupBatch(0, [verify])]))
    seq += [s.token_id for s in second.sampled]
    assert 1 <= len(second.sampled) <= 4
    assert second.drafts["a"] == reference_drafts(seq)
