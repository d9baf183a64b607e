"""Write a deployment as `moeserve serve --config` YAML files (keys from the settings table, settings.py).

A colocated winner is one file; a prefill/decode winner two: NAME.yaml (decode side) and
NAME.prefill.yaml, each an ordinary instance (moeserve's `kv_role` is set by hand or by the P/D
launcher). The plan behind them is made in the formats moeserve serve runs the checkpoint in, module by
module (served.py): on GPUs the triton kernels, written as `kernels: triton`, keep a block-FP8
checkpoint's FP8 layers in FP8 and run the rest in `dtype` (bfloat16, or float16 when asked); fp8 weights
asked of a BF16/FP16 checkpoint are `quantization: fp8` (every linear layer and routed expert quantized at
load); MLA's kv_b_proj, the LM head and routers stay in `dtype`; an fp8 KV cache is `kv_cache_dtype: fp8`.
On CPUs the cpu kernels run everything in float32 (or bfloat16 / float16 when asked), FP8 checkpoints
dequantized at load. The header names the formats and how the weights get there. `model` is the
checkpoint directory given to --model, or, for a shipped model name, a placeholder naming the Hugging
Face repository (which `moeserve serve --model org/name` also takes).
"""
from __future__ import annotations

import math
from pathlib import Path

from moeserve.capacity.model_spec import ModelSpec, shipped_hub_id
from moeserve.capacity.predict import Prediction, Workload
from moeserve.capacity.served import Served
from moeserve.cli_files import check_output

MIB = 1 << 20
# KV space the emitted config asks for beyond what the planned batch holds
KV_HEADROOM = 1.2


def checkpoint(model_arg: str | None, served: Served) -> tuple[str | None, str | None]:
    """(the `model` value, a note when it is a placeholder). None: the built-in model."""
    if model_arg is None:
        return None, None
    hub = shipped_hub_id(model_arg)
    if hub:
        return (f"<local directory of {hub}>",
                f"model: replace the placeholder with a local copy of {hub}, or with the name {hub} (moeserve serve "
                f"finds it in the Hugging Face cache or downloads it){_release(served)}")
    path = Path(model_arg)
    if path.name == "config.json":
        path = path.parent
    return str(path.resolve()), None


def _release(served: Served) -> str:
    """What serve makes of the shipped release's weights, for the placeholder's note."""
    s = served.settings
    if s["kernels"] == "triton" and s["quantization"] == "none" and "fp8" in (
            served.prec.attn_weights, served.prec.moe_weights, served.prec.dense_weights):
        return "; the release is block FP8, kept in FP8 on GPUs by the triton kernels"
    if s["quantization"] == "fp8":
        return "; its weights are quantized to FP8 at load (quantization: fp8)"
    return f"; its weights run in {s['dtype']}"


def serve_settings(pred: Prediction, w: Workload, model: str | None, gpus_per_node: int, formats: dict,
                   placement: str | None = None, mtp_drafts: int = 0) -> dict:
    """Serve keys for one instance of `pred` (a decode or colocated instance; a prefill one with
    phase 'prefill'): the layout, batch bounds and a KV budget that holds the planned batch; with
    `mtp_drafts` the plan's MTP speculative decoding (both sides of a split run it: the prefill side
    fills the MTP layer's KV cache, which moves with the prompt's). formats: the device, kernels, dtype,
    quantization and kv_cache_dtype settings (Served.settings)."""
    lay = pred.layout
    mem = pred.memory
    if pred.phase == "prefill":
        seqs_per_group = max(1, math.ceil(pred.batch * lay.tp / max(1, w.isl)))
        batched_tokens = max(1, int(pred.batch * lay.tp))
    else:
        seqs_per_group = max(1, round(pred.batch * lay.tp))
        batched_tokens = max(w.isl, 2048)
    kv_bytes = seqs_per_group * (w.isl + w.osl) * mem["kv_bytes_per_token"] * KV_HEADROOM
    return {
        "model": model,
        **formats,
        "max_model_len": w.isl + w.osl,
        "block_size": 64 if mem.get("mla") else 16,
        "kv_cache_memory_mb": max(64, math.ceil(kv_bytes / MIB)),
        "enable_prefix_caching": True,
        "max_num_seqs": seqs_per_group,
        "max_num_batched_tokens": batched_tokens,
        "tp": lay.tp,
        "ep": lay.world if lay.ep > 1 else 1,
        "nodes": max(1, math.ceil(lay.world / gpus_per_node)),
        "placement": placement,
        "speculative_config": {"method": "mtp", "num_speculative_tokens": mtp_drafts} if mtp_drafts else None,
    }


def write(path: str, settings: dict, header: list[str]) -> None:
    import yaml

    text = "".join(f"# {h}\n" for h in header) + yaml.safe_dump(settings, sort_keys=False)
    try:
        Path(path).write_text(text)
    except OSError as e:  # checked before planning (cli._check); a path can still fail (a directory, a full disk)
        raise ValueError(f"--emit: cannot write {path}: {e.strerror or e}") from None


def emit_files(path: str, model_arg: str | None, best: Prediction, w: Workload, hw, served: Served, model: ModelSpec,
               plan: str | None, mtp_drafts: int = 0, eagle: bool = False) -> list[tuple[str, str]]:
    """Write the winner's file(s) in the formats `served` runs; returns (path, what it holds) for each.
    mtp_drafts: the plan's drafts per step (--mtp-accept / --mtp-draft), written as speculative_config when the
    model's MTP layers draft them; `eagle`: an EAGLE-3 head drafts them (Predictor.draft_head), which moeserve
    serve does not run, and the file says so."""
    eagle = bool(mtp_drafts) and eagle
    mtp_drafts = mtp_drafts if model.mtp_layers and not eagle else 0
    value, note = checkpoint(model_arg, served)
    formats = served.settings
    header = [f"moeserve configure: {model.name} on {hw.name}, isl {w.isl}, osl {w.osl}",
              f"planned in the formats this file runs: {served.prec.describe()} (dtype {served.dtype})",
              *served.lines,
              f"predicted: TTFT {best.ttft_ms or 0:.1f} ms, TPOT {best.tpot_ms or 0:.2f} ms, "
              f"{best.output_tokens_per_s_per_gpu:.0f} output tok/s per GPU"]
    header += [note] if note else []
    header += ["the plan drafts with an EAGLE-3 head, which moeserve serve does not run (its drafts: mtp, ngram): "
               "this file serves without speculative decoding, slower than predicted"] if eagle else []
    placement = plan if plan and best.layout.ep > 1 else None
    out = Path(path)
    what = served.summary()
    if not best.sides:
        lay = best.layout
        if lay.moe_tp and lay.expert_tp not in (1, lay.tp if lay.ep == 1 else 0):
            header.append(f"moeserve splits experts TP x EP only as --tp {lay.tp} --ep 1 or whole experts per rank: "
                          f"this layout's --moe-tp {lay.moe_tp} is served as --ep {lay.world}")
        write(path, serve_settings(best, w, value, hw.gpus_per_node, formats, placement, mtp_drafts), header)
        return [(path, f"{best.phase} instance, tp {lay.tp}, ep {lay.world if lay.ep > 1 else 1}, {lay.world} GPUs, "
                       f"{what}")]
    pre, dec = best.sides
    prefill_path = str(out.with_name(out.stem + ".prefill.yaml"))
    check_output("--emit", prefill_path, "serve.prefill.yaml")  # before the decode side is written: both or none
    split = f"prefill/decode split {best.prefill_gpus}:{best.decode_gpus} GPUs"
    write(path, serve_settings(dec, w, value, hw.gpus_per_node, formats, placement, mtp_drafts),
          header + [f"{split}: this file is the decode side ({best.decode_gpus // dec.layout.world} instance(s)); "
                    f"{Path(prefill_path).name} the prefill side"])
    write(prefill_path, serve_settings(pre, w, value, hw.gpus_per_node, formats, placement, mtp_drafts),
          header + [f"{split}: this file is the prefill side ({best.prefill_gpus // pre.layout.world} instance(s)); "
                    f"{out.name} the decode side"]
          + (["routed experts offloaded to host memory in the plan: moeserve serve has no offload; this side needs "
              "its weights on the GPUs"] if pre.offload else []))
    return [(path, f"decode side, {best.decode_gpus // dec.layout.world} instance(s) of tp {dec.layout.tp} ep "
                   f"{dec.layout.world if dec.layout.ep > 1 else 1}, {what}"),
            (prefill_path, f"prefill side, {best.prefill_gpus // pre.layout.world} instance(s) of tp {pre.layout.tp} ep "
                           f"{pre.layout.world if pre.layout.ep > 1 else 1}, {what}")]
