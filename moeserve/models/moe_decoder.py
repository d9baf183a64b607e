"""The decoder skeleton shared by the MoE architectures: embed -> [attention + MLP/MoE] x L -> norm.

An architecture subclasses `MoEDecoderModel` and supplies three hooks: `build_attention(i)`,
`build_mlp(i)` (an `MoELayer` or a `GatedMLP`) and `load_layer(reader, i)` (its checkpoint names).
Shape legend: N tokens in the step, S sampled tokens, H hidden, V vocab.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from moeserve.dense.attention_metadata import AttentionMetadata
from moeserve.dense.embedding import ParallelLMHead, VocabParallelEmbedding
from moeserve.dense.norm import RMSNorm
from moeserve.dispatch.base import Dispatcher
from moeserve.dispatch.local import LocalDispatcher
from moeserve.models.checkpoint import CheckpointReader
from moeserve.moe.layer import MoELayer
from moeserve.parallel_state import ParallelContext


class DecoderLayer(nn.Module):
    """Pre-norm residual block: h = x + attn(norm1(x)); out = h + mlp(norm2(h))."""

    def __init__(
        self, self_attn: nn.Module, mlp: nn.Module, hidden: int, eps: float, ctx: ParallelContext, dtype: torch.dtype
    ):
        super().__init__()
        self.self_attn, self.mlp, self.ctx = self_attn, mlp, ctx
        self.input_layernorm = RMSNorm(hidden, eps, dtype)
        self.post_attention_layernorm = RMSNorm(hidden, eps, dtype)

    def forward(
        self,
        x: torch.Tensor,
        meta: AttentionMetadata,
        kv_cache: list[torch.Tensor],
        dispatcher: Dispatcher,
        max_tokens: int | None = None,
    ) -> torch.Tensor:
        """x [N, H] -> [N, H]. max_tokens: see MoELayer.forward."""
        y, h = self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), meta, kv_cache), residual=x)
        if isinstance(self.mlp, MoELayer):
            return h + self.mlp(y, dispatcher, max_tokens)
        out = self.mlp(y)
        if self.ctx.tp_size > 1:
            dist.all_reduce(out, group=self.ctx.tp_group)
        return h + out


class MoEDecoderModel(nn.Module):
    """The model contract of docs/architecture.md, for Llama-style MoE decoders."""

    def __init__(self, hf_config: Any, ctx: ParallelContext, dtype: torch.dtype):
        super().__init__()
        self.config, self.ctx, self.dtype = hf_config, ctx, dtype
        H = hf_config.hidden_size
        self.embed_tokens = VocabParallelEmbedding(hf_config.vocab_size, H, ctx, dtype)
        self.layers = nn.ModuleList(
            DecoderLayer(self.build_attention(i), self.build_mlp(i), H, hf_config.rms_norm_eps, ctx, dtype)
            for i in range(hf_config.num_hidden_layers)
        )
        self.norm = RMSNorm(H, hf_config.rms_norm_eps, dtype)
        self.lm_head = ParallelLMHead(hf_config.vocab_size, H, ctx, dtype)
        self.dispatcher: Dispatcher | None = None

    # --- architecture hooks -------------------------------------------------------------------
    def build_attention(self, i: int) -> nn.Module:
        raise NotImplementedError

    def build_mlp(self, i: int) -> nn.Module:
        raise NotImplementedError

    def load_layer(self, reader: CheckpointReader, i: int) -> None:
        raise NotImplementedError

    # --- the model contract ---------------------------------------------------------------------
    def moe_layers(self) -> dict[int, MoELayer]:
        return {i: layer.mlp for i, layer in enumerate(self.layers) if isinstance(layer.mlp, MoELayer)}

    def set_dispatcher(self, dispatcher: Dispatcher | None) -> None:
        """None = a LocalDispatcher (only valid with ep == 1)."""
        self.dispatcher = dispatcher

    def _dispatcher(self) -> Dispatcher:
        if self.dispatcher is None:
            if self.ctx.ep_size > 1:
                raise ValueError("ep > 1 needs a dispatcher: pass one to ModelRunner or set_dispatcher()")
            slots = {m.num_slots for m in self.moe_layers().values()} or {0}
            assert len(slots) == 1, "every MoE layer must have the same number of physical slots"
            self.dispatcher = LocalDispatcher(slots.pop())
        return self.dispatcher

    def load_weights(self, reader: CheckpointReader) -> None:
        self.embed_tokens.load(reader, "model.embed_tokens.weight")
        for i in range(len(self.layers)):
            self.load_layer(reader, i)
        self.norm.load(reader, "model.norm.weight")
        if getattr(self.config, "tie_word_embeddings", False):
            self.lm_head.load(reader, "model.embed_tokens.weight")
            reader.claim(["lm_head.weight"])
        else:
            self.lm_head.load(reader, "lm_head.weight")
        reader.finish()

    def kv_cache_shape(self, num_blocks: int, block_size: int) -> list[tuple[int, ...]]:
        return self.layers[0].self_attn.kv_cache_shape(num_blocks, block_size)

    def kv_cache_heads(self) -> tuple[int, int, int]:
        return self.layers[0].self_attn.kv_cache_heads()

    def forward(
        self, meta: AttentionMetadata, kv_caches: list[list[torch.Tensor]], max_tokens: int | None = None
    ) -> torch.Tensor:
        """meta for N tokens; kv_caches[layer] = that layer's cache tensors -> final hidden [N, H].
        max_tokens: the step's largest group token count, the same on every rank (None = unknown)."""
        dispatcher = self._dispatcher()
        hidden = self.embed_tokens(meta.input_ids)
        for layer, kv_cache in zip(self.layers, kv_caches):
            hidden = layer(hidden, meta, kv_cache, dispatcher, max_tokens)
        return self.norm(hidden)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [S, H] -> logits [S, V] fp32 (full vocabulary on every tp rank)."""
        return self.lm_head(hidden)
