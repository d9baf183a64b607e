"""Tiny DeepSeek-V3 (and GLM-4.5) checkpoints with a multi-token-prediction layer, and a plain-torch
reference of it.

transformers builds and saves the main model and ignores MTP layers, so the MTP weights are written
here: the block is layer N of a transformers twin one layer deeper (its own initialisation), the
rest (enorm, hnorm, eh_proj, shared_head.norm) random, shared_head.head and embed_tokens copies of
the main model's LM head and embedding, as DeepSeek's release has them.

    hf, mtp = make_mtp_checkpoint(path)              # hf: transformers model; mtp: MtpReference
    g, logits = mtp(next_tokens, hidden)             # the reference over one causal sequence
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import save_file


class MtpReference:
    """DeepSeek-V3's MTP module (arXiv 2412.19437, section 2.2) in plain torch around transformers'
    decoder layer: x_i = eh_proj([enorm(emb(t_{i+1})); hnorm(h_i)]), g = Block(x) causal over the
    sequence, logits = head(norm(g)). Inputs describe one sequence from position 0."""

    def __init__(self, hf, block, weights: dict[str, torch.Tensor]):
        self.hf, self.block, self.w = hf, block, weights
        self.eps = hf.config.rms_norm_eps

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    @torch.no_grad()
    def __call__(self, next_tokens: list[int], hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """next_tokens [M] (t_{i+1} at position i), hidden [M, H] -> (g [M, H], logits [M, V])."""
        M = len(next_tokens)
        e = self._rms(self.w["embed_tokens"][torch.tensor(next_tokens)], self.w["enorm"])
        x = torch.cat([e, self._rms(hidden, self.w["hnorm"])], dim=-1) @ self.w["eh_proj"].T
        positions = torch.arange(M)[None]
        cos_sin = self.hf.model.rotary_emb(x[None], positions)
        mask = torch.full((M, M), float("-inf")).triu(1)[None, None]
        g = self.block(x[None], attention_mask=mask, position_ids=positions, position_embeddings=cos_sin)
        g = g[0] if isinstance(g, tuple) else g
        g = g[0]
        return g, self._rms(g, self.w["shared_head.norm"]) @ self.w["shared_head.head"].T

    @torch.no_grad()
    def main_hidden(self, ids: list[int]) -> torch.Tensor:
        """[L, H]: transformers' final hidden states (after the last norm), what the LM head reads."""
        return self.hf.model(torch.tensor([ids])).last_hidden_state[0]


def make_mtp_checkpoint(path: Path, name: str = "v3", copy_head: bool = True) -> tuple[object, MtpReference]:
    """A tiny DeepSeek-V3 (test_deepseek_model's CONFIGS[name]) or, name "glm4_moe", a tiny GLM-4.5
    (tiny_models') saved at `path` with one MTP layer."""
    path = Path(path)
    if name == "glm4_moe":
        from tiny_models import make_hf_model, save_checkpoint

        hf = make_hf_model("glm4_moe")
        save_checkpoint(hf, path)
    else:
        from test_deepseek_model import _make_checkpoint

        hf = _make_checkpoint(name, path)
    cfg = copy.deepcopy(hf.config)
    N = cfg.num_hidden_layers
    cfg.num_hidden_layers = N + 1
    torch.manual_seed(1000 + N)
    block = type(hf)(cfg).model.layers[N].eval()
    H = cfg.hidden_size
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for pname, p in block.named_parameters():
            if p.dim() == 1 and "norm" in pname:
                p.copy_(torch.empty_like(p).uniform_(0.6, 1.4, generator=gen))
        bias = getattr(block.mlp.gate, "e_score_correction_bias", None)
        if bias is not None:
            bias.copy_(torch.randn(bias.shape, generator=gen) * 0.3)
    weights = {
        "enorm": torch.empty(H).uniform_(0.6, 1.4, generator=gen),
        "hnorm": torch.empty(H).uniform_(0.6, 1.4, generator=gen),
        "eh_proj": torch.randn(H, 2 * H, generator=gen) * 0.1,
        "shared_head.norm": torch.empty(H).uniform_(0.6, 1.4, generator=gen),
        "shared_head.head": hf.lm_head.weight.detach().clone() if copy_head
        else torch.randn(cfg.vocab_size, H, generator=gen) * 0.07,
        "embed_tokens": hf.model.embed_tokens.weight.detach().clone(),
    }
    tensors = {f"model.layers.{N}.{k}": v.detach().contiguous() for k, v in block.state_dict().items()}
    tensors |= {f"model.layers.{N}.{k}.weight": v.contiguous() for k, v in weights.items()}
    save_file(tensors, str(path / "mtp.safetensors"), metadata={"format": "pt"})
    index = path / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"].update({n: "mtp.safetensors" for n in tensors})
        index.write_text(json.dumps(data))
    config = json.loads((path / "config.json").read_text())
    config["num_nextn_predict_layers"] = 1
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return hf, MtpReference(hf, block, weights)
