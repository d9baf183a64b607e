"""What `moeserve configure` prints: a deployment as a JSON row, and the ranked table.

The table always shows the layout, batch, latencies, throughputs and memory (and with a GPU price, dollars a
million tokens: output, input for a prefill side); any other column (MoE TP,
the prefill side of a P/D split, offload) appears as soon as two rows differ in it, so two rows that
look alike are alike. Identical deployments are listed once.
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Prediction, Workload


def _side(lay: Layout) -> dict:
    return {"tp": lay.tp, "ep": lay.ep, "moe_tp": lay.expert_tp, "attention_dp": lay.attention_groups,
            "redundant_experts": lay.redundant, "world": lay.world, "pp": lay.pp}


def usd_per_million(p: Prediction, gpu_price: float | None) -> float | None:
    """What a million of the row's tokens cost at `gpu_price` dollars a GPU-hour: output tokens, input tokens for
    a prefill side alone; None without a price or without throughput."""
    speed = p.input_tokens_per_s_per_gpu if p.phase == "prefill" else p.output_tokens_per_s_per_gpu
    if gpu_price is None or speed <= 0:
        return None
    return gpu_price / (speed * 3600) * 1e6


def row(p: Prediction, w: Workload, balance, gpu_price: float | None = None) -> dict:
    lay = p.layout
    mem = p.memory.get("decode", p.memory)
    out = {
        "phase": p.phase, **_side(lay), "batch_per_gpu": p.batch, "balancedness": balance(lay),
        "ttft_ms": p.ttft_ms, "tpot_ms": p.tpot_ms, "step_ms": p.step_ms,
        "input_tokens_per_s_per_gpu": p.input_tokens_per_s_per_gpu, "output_tokens_per_s_per_gpu": p.output_tokens_per_s_per_gpu,
        "goodput_tokens_per_s_per_gpu": p.goodput(w), "meets_slo": p.meets(w),
        "memory_per_gpu_gb": mem.get("total_gb", 0.0), "memory": p.memory, "fits": p.fits, "breakdown_ms": p.breakdown_ms,
        "offload_weights": p.offload,
    }
    if gpu_price is not None:
        out["usd_per_million_tokens"] = usd_per_million(p, gpu_price)
    if p.phase == "disaggregated":
        pre = p.sides[0]
        out.update(prefill_gpus=p.prefill_gpus, decode_gpus=p.decode_gpus, pd_ratio=f"{p.prefill_gpus}:{p.decode_gpus}",
                   prefill={**_side(pre.layout), "batch_tokens_per_gpu": pre.batch, "ttft_ms": pre.ttft_ms,
                            "offload_weights": pre.offload})
    return out


def precision_fields(prec: Precision) -> dict:
    return {"attention_weights": prec.attn_weights, "moe_weights": prec.moe_weights, "dense_weights": prec.dense_weights,
            "kv": prec.kv, "dispatch": prec.dispatch_format, "combine": prec.combine_format, "activations": prec.activations,
            "mtp_weights": prec.for_mtp().moe_weights,
            **({"kv_b_proj_weights": prec.kv_b} if prec.kv_b else {}),
            **({"attention_compute": prec.attention_compute} if prec.attention_compute else {})}


def _workload(w: Workload) -> str:
    """The lengths and the objectives a table is for."""
    return (f"isl {w.isl}, osl {w.osl}" + (f", TTFT <= {w.ttft_slo_ms:g} ms" if w.ttft_slo_ms else "")
            + (f", TPOT <= {w.tpot_slo_ms:g} ms" if w.tpot_slo_ms else ""))


def _num(v, width: int, digits: int = 0) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.{digits}f}"


def _kind(r: dict) -> str:
    return f"P/D {r['pd_ratio']}" if r["phase"] == "disaggregated" else r["phase"]


def _pre(key: str):
    return lambda r: r["prefill"][key] if "prefill" in r else None


# (header, value, width, always shown)
COLUMNS = [
    ("#", None, 2, True),
    ("deployment", _kind, 13, True),
    ("tp", lambda r: r["tp"], 3, True),
    ("ep", lambda r: r["ep"], 4, True),
    ("moe-tp", lambda r: r["moe_tp"], 6, False),
    ("pp", lambda r: r["pp"], 3, False),
    ("dp", lambda r: r["attention_dp"], 4, True),
    ("red", lambda r: r["redundant_experts"], 4, True),
    ("batch", lambda r: r["batch_per_gpu"], 7, True),
    ("p.tp", _pre("tp"), 4, False),
    ("p.ep", _pre("ep"), 4, False),
    ("p.moe-tp", _pre("moe_tp"), 8, False),
    ("p.red", _pre("redundant_experts"), 5, False),
    ("p.batch", _pre("batch_tokens_per_gpu"), 7, False),
    ("p.offload", lambda r: ("yes" if r["prefill"]["offload_weights"] else "no") if "prefill" in r
     else ("yes" if r["offload_weights"] else "no"), 9, False),
    ("balance", lambda r: round(r["balancedness"], 3), 7, False),
]


PD_ALWAYS = ("p.tp", "p.ep", "p.batch")  # a P/D row's prefill layout is always shown


def _cell(v, width: int) -> str:
    if v is None:
        return f"{'-':>{width}}"
    if isinstance(v, float):
        return f"{v:>{width}g}"
    return f"{v!s:>{width}}"


def table(rows: list[dict], model, hw, w: Workload, notes: list[str]) -> str:
    head = f"{model.name} on {hw.name}: {_workload(w)}"
    unique, seen = [], set()
    for r in rows:
        key = tuple(str(f(r)) for _, f, _, _ in COLUMNS if f) + (round(r["output_tokens_per_s_per_gpu"], 3),)
        if key not in seen:
            seen.add(key)
            unique.append(r)
    split = any("prefill" in r for r in unique)
    moe_split = any(r["moe_tp"] != (r["tp"] if r["ep"] == 1 else 1) for r in unique)
    shown = [(h, f, wd) for h, f, wd, always in COLUMNS
             if always or (split and h in PD_ALWAYS) or (moe_split and h == "moe-tp") or len({str(f(r)) for r in unique}) > 1
             or (h == "pp" and any(r["pp"] > 1 for r in unique))]
    header = " ".join(f"{h:<{wd}}" if h in ("#", "deployment") else f"{h:>{wd}}" for h, _, wd in shown)
    priced = any("usd_per_million_tokens" in r for r in unique)
    lines = [head, *notes, header + "  TTFT ms  TPOT ms  in tok/s/GPU  out tok/s/GPU  goodput" + ("  $/Mtok" if priced else "")
             + "  GB/GPU (weights+kv+act+buf)"]
    for i, r in enumerate(unique, 1):
        cells = []
        for h, f, wd in shown:
            value = i if f is None else f(r)
            cells.append(f"{value!s:<{wd}}" if h in ("#", "deployment") else _cell(value, wd))
        mem = r["memory"].get("decode", r["memory"])
        lines.append(" ".join(cells) + f" {_num(r['ttft_ms'], 8, 1)} {_num(r['tpot_ms'], 8, 2)} "
                     f"{r['input_tokens_per_s_per_gpu']:>13.0f} {r['output_tokens_per_s_per_gpu']:>14.0f} "
                     f"{r['goodput_tokens_per_s_per_gpu']:>8.0f}"
                     + (f" {_num(r.get('usd_per_million_tokens'), 7, 2)}" if priced else "")
                     + f"  {mem['total_gb']:.1f} ({mem['weights_gb']:.1f}+"
                     f"{mem['kv_gb']:.1f}+{mem['activations_gb']:.1f}+{mem['dispatch_buffers_gb']:.1f})"
                     f"{'' if r['fits'] else '  DOES NOT FIT'}")
    return "\n".join(lines)


def comparison_row(card: str, best: dict, gpus: int, gpu_price: float | None) -> dict:
    """One compared card: its best deployment's row, the GPUs it takes and what they cost an hour."""
    return {"hardware": card, "error": None, **best, "gpus": gpus,
            "usd_per_hour": gpus * gpu_price if gpu_price else None, "gpu_price": gpu_price}


def comparison_table(rows: list[dict], failed: list[tuple[str, str]], model, w: Workload, rate: float | None) -> str:
    """The compared cards, one line each (the best deployment on each), then the cards where nothing fits."""
    head = (f"{model.name} on {', '.join(r['hardware'] for r in rows) or 'no card'}: {_workload(w)}"
            + (f"; {rate:g} requests a second" if rate else ""))
    priced = any(r["gpu_price"] for r in rows)
    lines = [head, f"{'card':<10} {'GPUs':>5}  {'deployment':<13} {'tp':>3} {'ep':>4} {'dp':>4} {'batch':>7}  TTFT ms  TPOT ms"
             f"  out tok/s/GPU  goodput" + ("  $/Mtok    $/hour" if priced else "") + "  GB/GPU"]
    for r in rows:
        mem = r["memory"].get("decode", r["memory"])
        lines.append(f"{r['hardware']:<10} {r['gpus']:>5}  {_kind(r):<13} {r['tp']:>3} {r['ep']:>4} {r['attention_dp']:>4} "
                     f"{_cell(r['batch_per_gpu'], 7)} {_num(r['ttft_ms'], 8, 1)} {_num(r['tpot_ms'], 8, 2)} "
                     f"{r['output_tokens_per_s_per_gpu']:>14.0f} {r['goodput_tokens_per_s_per_gpu']:>8.0f}"
                     + (f" {_num(r.get('usd_per_million_tokens'), 7, 2)} {_num(r['usd_per_hour'], 9, 2)}" if priced else "")
                     + f"  {mem['total_gb']:.1f}{'' if r['fits'] else '  DOES NOT FIT'}")
    lines += [f"{card:<10} {why}" for card, why in failed]
    lines.append("each card in its own formats and with its own track record: run configure on one card for its table, "
                 "notes and the spread published deployments like it had")
    return "\n".join(lines)
