"""Multi-token prediction (MTP) layers, as DeepSeek-V3 ships them (and GLM-4.5 after it, with the same
names), run as the draft model of speculative decoding (engine/mtp_drafter.py).

DeepSeek-V3 (arXiv 2412.19437, section 2.2): the MTP module at depth 1 combines, for each position
i, the main model's representation h_i with the embedding of the next token t_{i+1}, and predicts
t_{i+2} through one full transformer block and the shared output head:

    x_i   = eh_proj([enorm(embed(t_{i+1})) ; hnorm(h_i)])      # [2H] -> [H]
    g_i   = Block(x_1 .. x_i)                                   # causal, its own KV cache
    p_i+2 = softmax(shared_head.head(shared_head.norm(g_i)))

The concatenation puts the embedding first, as the released weights are read by DeepSeek's
inference code, vLLM and SGLang; h_i is the main model's final hidden state after its last norm
(what its LM head reads), as vLLM and SGLang feed it. vLLM also zeroes the embedding at position 0;
the paper and SGLang do not, and neither do we. Drafting k > 1 tokens with one layer chains it
(vLLM's and SGLang's way): the next position's input is (g_i, the draft just taken).

Checkpoint names: `model.layers.{N}.{enorm, hnorm, eh_proj, shared_head.norm, shared_head.head,
embed_tokens}` plus a full decoder layer under the same prefix (`self_attn.*`, `mlp.*`,
`input_layernorm`, `post_attention_layernorm`), N = num_hidden_layers. The release repeats the main
model's embedding and LM head there; a copy equal to the main one is not kept twice. Only the first
MTP layer runs (every release has one); later ones are read past unused.

Shape legend: N tokens, S sampled rows, H hidden, V vocabulary.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from moeserve.dense.attention_metadata import AttentionMetadata
from moeserve.dense.embedding import ParallelLMHead, VocabParallelEmbedding
from moeserve.dense.linear import ReplicatedLinear
from moeserve.dense.norm import RMSNorm
from moeserve.dispatch.base import Dispatcher
from moeserve.models.checkpoint import CheckpointReader
from moeserve.parallel_state import ParallelContext


class MtpLayer(nn.Module):
    """One MTP module around `block`, a decoder layer the architecture built for index N."""

    def __init__(self, block: nn.Module, hf_config: Any, ctx: ParallelContext, dtype: torch.dtype):
        super().__init__()
        H, eps = hf_config.hidden_size, hf_config.rms_norm_eps
        self.block = block
        self.enorm = RMSNorm(H, eps, dtype)
        self.hnorm = RMSNorm(H, eps, dtype)
        self.eh_proj = ReplicatedLinear(2 * H, H, False, dtype)
        self.head_norm = RMSNorm(H, eps, dtype)
        self.head = ParallelLMHead(hf_config.vocab_size, H, ctx, dtype)
        self.embed = VocabParallelEmbedding(hf_config.vocab_size, H, ctx, dtype)
        # the main model's embedding / LM head where the checkpoint's copies equal them (set by `load`);
        # a plain dict, so the main model's modules are not registered twice
        self._shared: dict[str, nn.Module] = {}

    def load(self, reader: CheckpointReader, prefix: str, load_block, main_embed: nn.Module, main_head: nn.Module) -> None:
        """prefix 'model.layers.{N}'; load_block(reader, N) reads the decoder layer's tensors."""
        self.enorm.load(reader, f"{prefix}.enorm.weight")
        self.hnorm.load(reader, f"{prefix}.hnorm.weight")
        self.eh_proj.load(reader, f"{prefix}.eh_proj")
        self.head_norm.load(reader, f"{prefix}.shared_head.norm.weight")
        for key, name, main in (("head", "shared_head.head.weight", main_head), ("embed", "embed_tokens.weight", main_embed)):
            if _same_as_main(reader, f"{prefix}.{name}", getattr(self, key), main):
                self._shared[key] = main
                delattr(self, key)
        load_block()

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, meta: AttentionMetadata,
                kv_cache: list[torch.Tensor], dispatcher: Dispatcher, max_tokens: int | None = None) -> torch.Tensor:
        """input_ids [N] int64 (the token after each position), hidden [N, H] (the main model's final
        hidden state at each position, or this layer's output at the previous one) -> g [N, H]."""
        embed = self._shared["embed"] if "embed" in self._shared else self.embed
        x = self.eh_proj(torch.cat([self.enorm(embed(input_ids)), self.hnorm(hidden)], dim=-1))
        return self.block(x, meta, kv_cache, dispatcher, max_tokens)

    def compute_logits(self, g: torch.Tensor) -> torch.Tensor:
        """g [S, H] -> logits [S, V] fp32 (full vocabulary on every tp rank)."""
        head = self._shared["head"] if "head" in self._shared else self.head
        return head(self.head_norm(g))


def _same_as_main(reader: CheckpointReader, name: str, own: nn.Module, main: nn.Module) -> bool:
    """Read `name` into `own`; True when it is absent or holds the same slice as `main` (share it)."""
    if not reader.has(name):
        return True
    own.load(reader, name)
    return torch.equal(own.weight, main.weight)
