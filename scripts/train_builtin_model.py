"""Train the built-in model (`moeserve serve` with no --model) and write it into the package.

    python scripts/train_builtin_model.py --work /tmp/builtin-train            # all stages, resumable
    python scripts/train_builtin_model.py --work W --stage export              # re-export the last checkpoint

Stages: `corpus` (Jane Austen's novels from Debian's r-cran-janeaustenr, installed with apt-get when
missing; "Persuasion" is held out), `tokenizer` (byte-level BPE, 4096 tokens, with the ChatML special
tokens), `train` (plain-torch twin of MixtralForCausalLM, checkpointed every --save-every steps and
resumed from the last checkpoint), `export` (loads the weights into transformers' MixtralForCausalLM,
checks its logits against the training model, saves float16 safetensors + tokenizer to
moeserve/engine/data/moeserve-tiny-moe/). Everything runs offline on CPU; docs/builtin_model.md has the
numbers of the shipped run.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from builtin_training_model import Shape, TrainingMixtral

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from moeserve.engine import builtin_model as bm  # noqa: E402

HELD_OUT_BOOK = "Persuasion"
SHAPE = Shape(vocab_size=bm.VOCAB_SIZE, **{k: bm.MODEL_SHAPE[k] for k in (
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "num_local_experts", "num_experts_per_tok", "rms_norm_eps")}, rope_theta=bm.ROPE_THETA)


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


# ---- corpus -------------------------------------------------------------------------------------------

_EXPORT_R = ('library(janeaustenr); b <- austen_books(); write.table(data.frame(book=as.character(b$book), '
             'text=b$text), "{out}", sep="\\t", quote=FALSE, row.names=FALSE, col.names=FALSE, fileEncoding="UTF-8")')


def _austen_lines(work: Path) -> list[tuple[str, str]]:
    tsv = work / "austen.tsv"
    if not tsv.exists():
        if subprocess.run(["Rscript", "-e", "library(janeaustenr)"], capture_output=True).returncode != 0 \
                if shutil.which("Rscript") else True:
            log("installing r-cran-janeaustenr with apt-get (Debian package, MIT; the novels are public domain)")
            subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "r-cran-janeaustenr"], check=True)
        subprocess.run(["Rscript", "-e", _EXPORT_R.format(out=tsv)], check=True)
    rows = []
    for line in tsv.read_text(encoding="utf-8").splitlines():
        book, _, text = line.partition("\t")
        rows.append((book, text))
    return rows


def _paragraphs(lines: list[str]) -> list[str]:
    """Hard-wrapped lines -> one string per paragraph; `_italics_` markers and double spaces dropped."""
    out, cur = [], []
    for line in lines + [""]:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            out.append(re.sub(r" {2,}", " ", " ".join(cur).replace("_", "")))
            cur = []
    return out


def stage_corpus(work: Path) -> None:
    books: dict[str, list[str]] = {}
    for book, text in _austen_lines(work):
        books.setdefault(book, []).append(text)
    train = [("\n\n".join(_paragraphs(lines))) for b, lines in books.items() if b != HELD_OUT_BOOK]
    (work / "train.txt").write_text("\n\n<|endoftext|>\n\n".join(train), encoding="utf-8")
    (work / "heldout.txt").write_text("\n\n".join(_paragraphs(books[HELD_OUT_BOOK])), encoding="utf-8")
    log(f"corpus: {len(train)} training books, {sum(map(len, train)):,} chars; held out {HELD_OUT_BOOK}")


# ---- tokenizer ----------------------------------------------------------------------------------------

def stage_tokenizer(work: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=bm.VOCAB_SIZE, special_tokens=list(bm.SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    text = (work / "train.txt").read_text(encoding="utf-8").replace("<|endoftext|>", "")
    tok.train_from_iterator(text.split("\n\n"), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=list(bm.SPECIAL_TOKENS[1:]))
    fast.chat_template = bm.CHAT_TEMPLATE
    fast.save_pretrained(work / "tokenizer")
    log(f"tokenizer: {len(fast)} tokens")


def _tokenizer(work: Path):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(work / "tokenizer")


def _ids(work: Path, name: str) -> torch.Tensor:
    cache = work / f"{name}.ids.pt"
    if not cache.exists():
        text = (work / f"{name}.txt").read_text(encoding="utf-8")
        torch.save(torch.tensor(_tokenizer(work).encode(text), dtype=torch.int64), cache)
    return torch.load(cache)


# ---- training -----------------------------------------------------------------------------------------

def _lr(step: int, elapsed_s: float, args) -> float:
    """Warm-up, then constant, then a linear decay to 10% over the last --decay share of the time budget
    (a time budget, not a step count, because the CPU this runs on is shared and its speed unknown)."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    left = 1.0 - elapsed_s / (args.minutes * 60)
    return args.lr * (0.1 + 0.9 * min(1.0, max(0.0, left) / args.decay))


def _batch(ids: torch.Tensor, args, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, len(ids) - args.seq - 1, (args.batch,), generator=gen)
    return torch.stack([ids[s:s + args.seq + 1] for s in starts.tolist()])


@torch.no_grad()
def evaluate(model: TrainingMixtral, ids: torch.Tensor, text_bytes: int, seq: int, max_tokens: int) -> dict:
    """Mean next-token loss over the first max_tokens held-out tokens, in nats/token and bits/byte."""
    n = min(len(ids) - 1, max_tokens)
    total, count = 0.0, 0
    for s in range(0, n - seq, seq):
        x = ids[s:s + seq + 1][None]
        logits, _, _ = model(x[:, :-1])
        total += F.cross_entropy(logits[0], x[0, 1:], reduction="sum").item()
        count += seq
    nats = total / count
    return {"loss": nats, "bpb": nats / math.log(2) * len(ids) / text_bytes}


def stage_train(work: Path, args) -> None:
    torch.manual_seed(args.seed)
    train_ids, held_ids = _ids(work, "train"), _ids(work, "heldout")
    held_bytes = len((work / "heldout.txt").read_bytes())
    model = TrainingMixtral(SHAPE)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)
    step, elapsed = 0, 0.0
    ckpt = work / "checkpoint.pt"
    if ckpt.exists():
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        gen.set_state(state["gen"])
        step, elapsed = state["step"], state["elapsed_s"]
        log(f"resumed at step {step} after {elapsed / 60:.1f} minutes")
    log(f"training {sum(p.numel() for p in model.parameters()):,} parameters on {len(train_ids):,} tokens, "
        f"{args.minutes} minutes of {args.batch}x{args.seq}-token steps")
    t0 = start = time.time() - elapsed
    while (elapsed := time.time() - start) < args.minutes * 60:
        for group in opt.param_groups:
            group["lr"] = _lr(step, elapsed, args)
        x = _batch(train_ids, args, gen)
        logits, aux, routes = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, SHAPE.vocab_size), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss + args.aux_coef * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % args.log_every == 0:
            loads = [torch.bincount(r.reshape(-1), minlength=SHAPE.num_local_experts).float() for r in routes]
            bal = " ".join(f"{(l.mean() / l.max()).item():.2f}" for l in loads)
            log(f"step {step} loss {loss.item():.3f} aux {aux.item():.3f} balancedness {bal} "
                f"{(time.time() - t0) / args.log_every:.2f}s/step lr {_lr(step, elapsed, args):.2e}")
            t0 = time.time()
        done = time.time() - start >= args.minutes * 60
        if step % args.save_every == 0 or done:
            model.eval()
            ev = evaluate(model, held_ids, held_bytes, 256, args.eval_tokens)
            model.train()
            log(f"step {step} held-out loss {ev['loss']:.3f} bits/byte {ev['bpb']:.3f}")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                        "step": step, "elapsed_s": time.time() - start}, work / "checkpoint.tmp")
            (work / "checkpoint.tmp").replace(ckpt)


# ---- export -------------------------------------------------------------------------------------------

def stage_export(work: Path, out: Path) -> None:
    from transformers import MixtralForCausalLM

    model = TrainingMixtral(SHAPE)
    model.load_state_dict(torch.load(work / "checkpoint.pt")["model"])
    model = model.half().float().eval()  # the shipped weights are float16: compare what is shipped
    tokenizer = _tokenizer(work)
    hf = MixtralForCausalLM(bm.mixtral_config(len(tokenizer))).float().eval()
    missing, unexpected = hf.load_state_dict(model.state_dict(), strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    ids = torch.tensor([tokenizer.encode("It is a truth universally acknowledged, that a single man in "
                                         "possession of a good fortune, must be in want of a wife.")])
    with torch.no_grad():
        ours, hf_logits = model(ids)[0], hf(ids).logits
    err = ((ours - hf_logits).abs().max() / hf_logits.abs().max()).item()
    log(f"export: transformers vs training model, max relative logit error {err:.2e}")
    assert err < 1e-4, err
    bm.set_generation_config(hf, tokenizer)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    hf.half().save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    sizes = {p.name: p.stat().st_size for p in out.iterdir()}
    log(f"export: wrote {out} ({sum(sizes.values()) / 1e6:.1f} MB: {json.dumps(sizes)})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="scratch folder (corpus, tokenizer, checkpoints)")
    p.add_argument("--stage", choices=("all", "corpus", "tokenizer", "train", "export"), default="all")
    p.add_argument("--out", type=Path, default=bm.builtin_model_dir())
    p.add_argument("--minutes", type=float, default=48.0, help="training time budget (resumes count it)")
    p.add_argument("--decay", type=float, default=0.3, help="share of the budget spent decaying the lr")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--aux-coef", type=float, default=0.003, help="weak, so routing stays skewed")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--save-every", type=int, default=20)
    p.add_argument("--eval-tokens", type=int, default=4096)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    stages = ("corpus", "tokenizer", "train", "export") if args.stage == "all" else (args.stage,)
    for stage in stages:
        if stage == "corpus" and not (args.work / "train.txt").exists() or args.stage == "corpus":
            stage_corpus(args.work)
        elif stage == "tokenizer" and not (args.work / "tokenizer").exists() or args.stage == "tokenizer":
            stage_tokenizer(args.work)
        elif stage == "train":
            stage_train(args.work, args)
        elif stage == "export":
            stage_export(args.work, args.out)


if __name__ == "__main__":
    main()
