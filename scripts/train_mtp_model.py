"""Train a tiny DeepSeek-V3 with one multi-token-prediction (MTP) layer on the built-in model's corpus,
on CPU in minutes, for measuring MTP speculative decoding (benchmarks/spec_decode.py).

    python scripts/train_mtp_model.py --work /tmp/mtp-train --out /tmp/tiny-v3-mtp --minutes 8
    python benchmarks/spec_decode.py --model /tmp/tiny-v3-mtp --spec '{"method": "mtp", "num_speculative_tokens": 1}'

Stages: `corpus` (train_builtin_model.py's: Jane Austen's novels from Debian's r-cran-janeaustenr,
"Persuasion" held out), `train`, `export`. The tokenizer is the built-in model's (shipped), and so is
the start of the embedding and LM head (same vocabulary and hidden size), which saves the minutes a
tiny model spends learning its tokens. The model is transformers' DeepseekV3ForCausalLM (MLA, a dense
first layer, then sigmoid-routed experts with a shared one), and the MTP module is DeepSeek-V3's
(arXiv 2412.19437, 2.2): x_i = eh_proj([enorm(emb(t_{i+1})); hnorm(h_i)]), one transformers decoder
layer, the shared LM head after its own norm, predicting t_{i+2}. Training minimises DeepSeek's joint
loss, L_main + 0.3 L_mtp, with AdamW under a wall-clock budget. Routing is left unbalanced (no bias
update, no auxiliary loss): a benchmark model, not a released one.

The export writes a Hugging Face checkpoint as DeepSeek ships one: transformers' save_pretrained of
the main model, the MTP layer's tensors under `model.layers.{N}.*` (with copies of the embedding and
LM head as `embed_tokens` and `shared_head.head`), `num_nextn_predict_layers: 1`, and the built-in
tokenizer; then checks that moeserve's main and MTP logits equal the training modules' (relative
error below 1e-4).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from moeserve.engine import builtin_model as bm  # noqa: E402
from train_builtin_model import log, stage_corpus  # noqa: E402

MTP_WEIGHT = 0.3  # DeepSeek-V3's lambda for the first 10T tokens
SHAPE = dict(vocab_size=bm.VOCAB_SIZE, hidden_size=128, intermediate_size=256, moe_intermediate_size=128,
             num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1,
             n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
             q_lora_rank=None, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
             max_position_embeddings=4096, routed_scaling_factor=1.0, norm_topk_prob=True, rms_norm_eps=1e-6,
             tie_word_embeddings=False, bos_token_id=None, eos_token_id=0, pad_token_id=0)


def config():
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(**SHAPE, rope_parameters={"rope_type": "default", "rope_theta": bm.ROPE_THETA},
                           num_nextn_predict_layers=1)
    cfg.architectures = ["DeepseekV3ForCausalLM"]
    cfg._attn_implementation = "sdpa"
    return cfg


class Mtp(nn.Module):
    """DeepSeek-V3's MTP module around transformers' decoder layer; the LM head is the main model's."""

    def __init__(self, cfg):
        super().__init__()
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer, DeepseekV3RMSNorm

        H = cfg.hidden_size
        self.enorm, self.hnorm = DeepseekV3RMSNorm(H, cfg.rms_norm_eps), DeepseekV3RMSNorm(H, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        self.block = DeepseekV3DecoderLayer(cfg, layer_idx=cfg.num_hidden_layers)
        self.head_norm = DeepseekV3RMSNorm(H, cfg.rms_norm_eps)

    def forward(self, model, next_ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """next_ids [B, T] (t_{i+1}), hidden [B, T, H] (main final hidden at i) -> logits [B, T, V] for t_{i+2}."""
        T = next_ids.shape[1]
        x = self.eh_proj(torch.cat([self.enorm(model.model.embed_tokens(next_ids)), self.hnorm(hidden)], dim=-1))
        positions = torch.arange(T)[None].expand(x.shape[0], T)
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        g = self.block(x, attention_mask=mask, position_ids=positions,
                       position_embeddings=model.model.rotary_emb(x, positions))
        g = g[0] if isinstance(g, tuple) else g
        return model.lm_head(self.head_norm(g))


def build(seed: int):
    from transformers import AutoModelForCausalLM, DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    cfg = config()
    model = DeepseekV3ForCausalLM(cfg)
    mtp = Mtp(cfg)
    # transformers initialises a module inside its PreTrainedModel only: the MTP block's router weight is
    # torch.empty (whatever memory held, NaN at times) until the main model's rule is applied to it
    for module in mtp.modules():
        model._init_weights(module)
    builtin = AutoModelForCausalLM.from_pretrained(bm.builtin_model_dir(), dtype=torch.float32)
    with torch.no_grad():  # the built-in model's token embedding and LM head: same tokenizer, same hidden size
        model.model.embed_tokens.weight.copy_(builtin.model.embed_tokens.weight)
        model.lm_head.weight.copy_(builtin.lm_head.weight)
    return model, mtp


def _ids(work: Path, name: str) -> torch.Tensor:
    cache = work / f"{name}.builtin-ids.pt"
    if not cache.exists():
        text = (work / f"{name}.txt").read_text(encoding="utf-8")
        torch.save(torch.tensor(bm.build_tokenizer().encode(text), dtype=torch.int64), cache)
    return torch.load(cache)


def losses(model, mtp, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, T + 1] -> (next-token loss, MTP loss on the token after it)."""
    V = SHAPE["vocab_size"]
    hidden = model.model(x[:, :-1]).last_hidden_state  # [B, T, H], after the final norm
    main = F.cross_entropy(model.lm_head(hidden).reshape(-1, V), x[:, 1:].reshape(-1))
    # position i: (h_i, t_{i+1}) -> t_{i+2}, for the positions whose t_{i+2} is in the window
    mtp_logits = mtp(model, x[:, 1:-1], hidden[:, :-1])
    return main, F.cross_entropy(mtp_logits.reshape(-1, V), x[:, 2:].reshape(-1))


def _lr(step: int, elapsed_s: float, args) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    left = 1.0 - elapsed_s / (args.minutes * 60)
    return args.lr * (0.1 + 0.9 * min(1.0, max(0.0, left) / 0.3))


@torch.no_grad()
def evaluate(model, mtp, ids: torch.Tensor, seq: int, tokens: int) -> tuple[float, float, float]:
    """Held-out (main loss, MTP loss, how often the MTP argmax equals the main model's own next argmax
    after it: what a greedy draft's acceptance estimates)."""
    main_l, mtp_l, agree, n = 0.0, 0.0, 0.0, 0
    for s in range(0, min(len(ids), tokens) - seq - 1, seq):
        x = ids[s:s + seq + 1][None]
        a, b = losses(model, mtp, x)
        hidden = model.model(x[:, :-1]).last_hidden_state
        greedy = model.lm_head(hidden).argmax(-1)  # [1, T]
        draft = mtp(model, greedy[:, :-1], hidden[:, :-1]).argmax(-1)  # t_{i+2} given the model's own t_{i+1}
        # the main model's argmax at i + 1 given the greedy token there is what verification compares with;
        # on held-out text the context differs, so this is an estimate
        follow = model.lm_head(model.model(torch.cat([x[:, :1], greedy], 1)[:, :-1]).last_hidden_state).argmax(-1)
        agree += (draft[0] == follow[0, 1:]).float().mean().item()
        main_l, mtp_l, n = main_l + a.item(), mtp_l + b.item(), n + 1
    return main_l / n, mtp_l / n, agree / n


def stage_train(work: Path, args) -> None:
    train_ids, held_ids = _ids(work, "train"), _ids(work, "heldout")
    model, mtp = build(args.seed)
    model.train(), mtp.train()
    params = list(model.parameters()) + list(mtp.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(args.seed)
    log(f"training {sum(p.numel() for p in model.parameters()):,} + {sum(p.numel() for p in mtp.parameters()):,} "
        f"(MTP) parameters on {len(train_ids):,} tokens for {args.minutes} minutes of {args.batch}x{args.seq}-token steps")
    start, step, t0 = time.time(), 0, time.time()
    while (elapsed := time.time() - start) < args.minutes * 60:
        for group in opt.param_groups:
            group["lr"] = _lr(step, elapsed, args)
        starts = torch.randint(0, len(train_ids) - args.seq - 2, (args.batch,), generator=gen)
        x = torch.stack([train_ids[s:s + args.seq + 1] for s in starts.tolist()])
        main, extra = losses(model, mtp, x)
        if not torch.isfinite(main + extra):
            log(f"step {step}: loss is not finite ({main.item()}, {extra.item()}): batch skipped")
            continue
        opt.zero_grad(set_to_none=True)
        (main + MTP_WEIGHT * extra).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % args.log_every == 0:
            log(f"step {step} loss {main.item():.3f} mtp {extra.item():.3f} {(time.time() - t0) / args.log_every:.2f}s/step")
            t0 = time.time()
    model.eval(), mtp.eval()
    main_l, mtp_l, agree = evaluate(model, mtp, held_ids, 128, args.eval_tokens)
    log(f"after {step} steps ({(time.time() - start) / 60:.1f} min): held-out loss {main_l:.3f}, MTP loss {mtp_l:.3f}, "
        f"MTP argmax = the model's own next argmax {100 * agree:.1f}%")
    torch.save({"model": model.state_dict(), "mtp": mtp.state_dict(), "steps": step,
                "held_out": {"loss": main_l, "mtp_loss": mtp_l, "agreement": agree}}, work / "mtp-checkpoint.pt")


def stage_export(work: Path, out: Path) -> None:
    from safetensors.torch import save_file
    from transformers import DeepseekV3ForCausalLM

    state = torch.load(work / "mtp-checkpoint.pt")
    cfg = config()
    model, mtp = DeepseekV3ForCausalLM(cfg).eval(), Mtp(cfg).eval()
    model.load_state_dict(state["model"])
    mtp.load_state_dict(state["mtp"])
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.generation_config.eos_token_id = [0, 2]
    model.save_pretrained(tmp, safe_serialization=True)
    N = cfg.num_hidden_layers
    tensors = {f"model.layers.{N}.block.{k}": v for k, v in mtp.block.state_dict().items()}
    tensors = {k.replace(".block.", "."): v.contiguous() for k, v in tensors.items()}
    tensors |= {f"model.layers.{N}.enorm.weight": mtp.enorm.weight, f"model.layers.{N}.hnorm.weight": mtp.hnorm.weight,
                f"model.layers.{N}.eh_proj.weight": mtp.eh_proj.weight,
                f"model.layers.{N}.shared_head.norm.weight": mtp.head_norm.weight,
                f"model.layers.{N}.shared_head.head.weight": model.lm_head.weight,
                f"model.layers.{N}.embed_tokens.weight": model.model.embed_tokens.weight}
    save_file({k: v.detach().clone().contiguous() for k, v in tensors.items()}, str(tmp / "mtp.safetensors"),
              metadata={"format": "pt"})
    index = tmp / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"].update({n: "mtp.safetensors" for n in tensors})
        index.write_text(json.dumps(data, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        if (bm.builtin_model_dir() / name).exists():
            shutil.copy(bm.builtin_model_dir() / name, tmp / name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    _check(out, model, mtp)
    log(f"export: wrote {out} ({sum(p.stat().st_size for p in out.iterdir()) / 1e6:.1f} MB); held-out: "
        f"{json.dumps(state['held_out'])}")


@torch.no_grad()
def _check(out: Path, model, mtp) -> None:
    """moeserve's main and MTP logits over a sentence equal the training modules' (relative error < 1e-4)."""
    from moeserve.config import CacheConfig, EngineConfig, ModelConfig
    from moeserve.core.step_plan import GroupBatch, ScheduledSeq
    from moeserve.dense.attention_metadata import build_attention_metadata
    from moeserve.engine.model_runner import ModelRunner
    from moeserve.parallel_state import SINGLE
    from moeserve.speculative_config import SpeculativeConfig

    ids = bm.build_tokenizer().encode("It is a truth universally acknowledged, that a single man in possession of a good")
    runner = ModelRunner(EngineConfig(model=ModelConfig(model=str(out)), cache=CacheConfig(block_size=16, num_blocks=8),
                                      speculative=SpeculativeConfig("mtp", 1)), SINGLE)
    meta = build_attention_metadata(GroupBatch(0, [ScheduledSeq("check", ids, 0, [0, 1], True)]), 16)
    hidden = runner.model(meta, runner.kv_caches)
    want_hidden = model.model(torch.tensor([ids])).last_hidden_state[0]
    g = runner.model.mtp_forward(torch.tensor(ids[1:] + [0]), hidden, meta, runner.kv_caches)
    got = [runner.model.compute_logits(hidden), runner.model.mtp_logits(g)[:-1]]
    want = [model.lm_head(want_hidden), mtp(model, torch.tensor([ids[1:]]), want_hidden[None, :-1])[0]]
    for what, a, b in zip(("main", "MTP"), got, want):
        err = ((a - b).norm() / b.norm()).item()
        log(f"export check: moeserve vs the training module, {what} logits relative error {err:.1e}")
        assert err < 1e-4, (what, err)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="scratch folder (corpus, token ids, checkpoint)")
    p.add_argument("--out", type=Path, required=True, help="where the checkpoint is written")
    p.add_argument("--stage", choices=("all", "corpus", "train", "export"), default="all")
    p.add_argument("--minutes", type=float, default=8.0, help="training time budget")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--eval-tokens", type=int, default=4096)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage in ("all", "corpus") and (args.stage == "corpus" or not (args.work / "train.txt").exists()):
        stage_corpus(args.work)
    if args.stage in ("all", "train"):
        stage_train(args.work, args)
    if args.stage in ("all", "export"):
        stage_export(args.work, args.out)


if __name__ == "__main__":
    main()
