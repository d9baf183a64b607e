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
from moeserve.models.mtp import MtpLayer
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
        self.mtp: MtpLayer | None = None  # the draft model of speculative decoding (enable_mtp)

    # --- architecture hooks -------------------------------------------------------------------
    def build_attention(self, i: int) -> nn.Module:
        raise NotImplementedError

    def build_mlp(self, i: int) -> nn.Module:
        raise NotImplementedError

    def load_layer(self, reader: CheckpointReader, i: int) -> None:
        raise NotImplementedError

    def decoder_layer(self, i: int) -> DecoderLayer:
        """Decoder layer i; i == num_hidden_layers is the MTP layer's block (enable_mtp)."""
        if i == len(self.layers) and self.mtp is not None:
            return self.mtp.block
        return self.layers[i]

    # --- the model contract ---------------------------------------------------------------------
    def moe_layers(self) -> dict[int, MoELayer]:
        """The main model's MoE layers (placement plans, routing traces and rebalancing cover these)."""
        return {i: layer.mlp for i, layer in enumerate(self.layers) if isinstance(layer.mlp, MoELayer)}

    def mtp_moe_layers(self) -> list[MoELayer]:
        """The MTP layer's MoE layer, if it has one (kept on a static placement)."""
        return [self.mtp.block.mlp] if self.mtp is not None and isinstance(self.mtp.block.mlp, MoELayer) else []

    # --- multi-token prediction (models/mtp.py) ---------------------------------------------------
    def enable_mtp(self) -> None:
        """Build the first MTP layer from the architecture's own hooks (index num_hidden_layers), before
        `load_weights`; its KV cache is one more layer's (`num_kv_layers`)."""
        cfg, n = self.config, len(self.layers)
        block = DecoderLayer(self.build_attention(n), self.build_mlp(n), cfg.hidden_size, cfg.rms_norm_eps, self.ctx,
                             self.dtype)
        self.mtp = MtpLayer(block, cfg, self.ctx, self.dtype)

    @property
    def num_kv_layers(self) -> int:
        """KV-cache layers this model writes: its decoder layers, and the MTP layer's when enabled."""
        return len(self.layers) + (self.mtp is not None)

    def mtp_forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, meta: AttentionMetadata,
                    kv_caches: list[list[torch.Tensor]], max_tokens: int | None = None) -> torch.Tensor:
        """input_ids [N] int64 (the token after each position), hidden [N, H] -> the MTP layer's g [N, H],
        its KV written to the last cache layer. Every rank calls it as often as every other (its MoE)."""
        assert self.mtp is not None and len(kv_caches) == self.num_kv_layers
        return self.mtp(input_ids, hidden, meta, kv_caches[-1], self._dispatcher(), max_tokens)

    def mtp_logits(self, g: torch.Tensor) -> torch.Tensor:
        """g [S, H] -> draft logits [S, V] fp32."""
        return self.mtp.compute_logits(g)

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
        if self.mtp is not None:
            n = len(self.layers)
            self.mtp.load(reader, f"model.layers.{n}", lambda: self.load_layer(reader, n), self.embed_tokens, self.lm_head)
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
