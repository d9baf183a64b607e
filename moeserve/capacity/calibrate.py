"""`moeserve configure --calibrate`: time this CPU and write a hardware profile for it.

Imports torch (only this module of moeserve.capacity does, and only when --calibrate runs). Five
short measurements, one torch thread each (what a moeserve rank of a small model runs with
--num-threads 1): an fp32 and a bf16 GEMM (FLOP/s), a large copy (memory bandwidth), one decoder layer of
the built-in MoE at one token (the fixed cost of a layer beyond its roofline time), and decode
steps of the built-in model in moeserve's engine at 1, 2, 4, 16 and 32 sequences (the fixed, per-sequence
and per-active-expert cost of a step beyond its roofline).
About a minute on an idle 2-core machine. Times are CPU seconds of this process
(time.process_time): with one thread and no helpers that is what an idle core takes, and it stays
put when other jobs share the machine, where wall-clock time does not.
"""
from __future__ import annotations

import datetime
import os
import platform
import time

from moeserve import envs

THREADS = 1
clock = time.process_time


def _best(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = clock()
        fn()
        best = min(best, clock() - t)
    return best


def gemm_tflops(n: int = 512, dtype: str = "float32") -> float:
    import torch

    a, b = torch.randn(n, n, dtype=getattr(torch, dtype)), torch.randn(n, n, dtype=getattr(torch, dtype))
    torch.mm(a, b)
    return 2 * n ** 3 / _best(lambda: torch.mm(a, b), 30) / 1e12


def memory_gbs(mib: int = 256) -> float:
    import torch

    src = torch.ones(mib * (1 << 20) // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    return 2 * src.numel() * 4 / _best(lambda: dst.copy_(src), 8) / 1e9


def layer_seconds() -> float:
    """One decoder layer of the built-in model's shape at one token, in plain torch (median of 200)."""
    import torch

    from moeserve.builtin_model_info import builtin_config_fields

    f = builtin_config_fields()
    h, heads, kv, hd, e, inter = (f["hidden_size"], f["num_attention_heads"], f["num_key_value_heads"], f["head_dim"],
                                  f["num_local_experts"], f["intermediate_size"])
    qkv = torch.randn(h, (heads + 2 * kv) * hd) * 0.02
    o = torch.randn(heads * hd, h) * 0.02
    router = torch.randn(h, e) * 0.02
    w13 = torch.randn(e, h, 2 * inter) * 0.02
    w2 = torch.randn(e, inter, h) * 0.02
    cache_k, cache_v = torch.randn(1, heads, 64, hd), torch.randn(1, heads, 64, hd)
    x = torch.randn(1, h)

    def layer():
        y = torch.nn.functional.rms_norm(x, (h,))
        q, k, v = (y @ qkv).split([heads * hd, kv * hd, kv * hd], dim=-1)
        att = torch.nn.functional.scaled_dot_product_attention(q.view(1, heads, 1, hd), cache_k, cache_v)
        y = x + att.reshape(1, -1) @ o
        z = torch.nn.functional.rms_norm(y, (h,))
        weights, ids = torch.topk(torch.softmax(z @ router, dim=-1), f["num_experts_per_tok"])
        out = torch.zeros_like(z)
        for j in range(ids.shape[1]):
            gate, up = (z @ w13[ids[0, j]]).chunk(2, dim=-1)
            out += weights[0, j] * ((torch.nn.functional.silu(gate) * up) @ w2[ids[0, j]])
        return y + out

    for _ in range(20):
        layer()
    times = []
    for _ in range(200):
        t = clock()
        layer()
        times.append(clock() - t)
    return sorted(times)[len(times) // 2]


def engine_decode_step_seconds(batches=(1, 2, 4, 16, 32)) -> dict:
    """Seconds per decode step of the built-in model in moeserve's engine at each batch: the
    difference of two runs (8 and 40 new tokens) cancels the prefill and the first token."""
    from moeserve import LLM, SamplingParams

    previous = os.environ.get(envs.IDLE_HELPERS.name)
    os.environ[envs.IDLE_HELPERS.name] = "0"  # one thread, nothing borrowed: CPU time is the step's cost
    try:
        llm = LLM(num_threads=THREADS, expert_threads=1)
        out = {}
        for b in batches:
            prompts = [[5 + i, 6, 7, 8, 9, 10, 11, 12] for i in range(b)]
            runs = {}
            for n in (8, 40):
                params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, detokenize=False)
                llm.generate(prompts, params)
                runs[n] = _best(lambda: llm.generate(prompts, params), 2)
            out[b] = (runs[40] - runs[8]) / 32
        llm.shutdown()
        return out
    finally:  # the caller's process (a test run, say) keeps its own setting
        if previous is None:
            os.environ.pop(envs.IDLE_HELPERS.name, None)
        else:
            os.environ[envs.IDLE_HELPERS.name] = previous


def measure() -> dict:
    """Time this machine; the profile (profile_from) is built from these timings."""
    import torch

    torch.set_num_threads(THREADS)
    with open("/proc/meminfo") as f:
        mem_gb = int(f.readline().split()[1]) * 1024 / 1e9
    when = datetime.date.today().isoformat()
    return {"where": f"{platform.machine()}, {os.cpu_count()} cores, {THREADS} torch thread, {when}",
            "cpus": os.cpu_count(), "memory_gb": mem_gb, "gemm_tflops": gemm_tflops(),
            "gemm_bf16_tflops": gemm_tflops(dtype="bfloat16"), "copy_gbs": memory_gbs(),
            "layer_s": layer_seconds(), "steps": engine_decode_step_seconds()}


def profile_from(t: dict) -> dict:
    """A CPU profile from measured timings `t` (measure()'s keys): the rates stored as the 'peaks' the
    shared efficiency factors turn back into what was measured, and the fixed host costs fitted as what
    the modeled layers and steps leave. Pure: rerun it on recorded timings when the model changes."""
    import numpy as np

    from moeserve.capacity.efficiency import DEFAULT
    from moeserve.capacity.hardware import from_dict
    from moeserve.capacity.layout import Layout, Precision
    from moeserve.capacity.model_spec import load_model
    from moeserve.capacity.step_time import StepInput, StepModel

    where, tflops, gbs = t["where"], t["gemm_tflops"], t["copy_gbs"]
    src = f"moeserve configure --calibrate ({where})"
    data = {
        "name": "cpu",
        "memory_gb": {"value": round(t["memory_gb"], 1), "source": f"/proc/meminfo MemTotal ({where})"},
        "memory_bandwidth_gbs": {"value": round(gbs / DEFAULT.weight_stream, 3), "source":
                                 f"{src}: copy of 256 MiB fp32 at {gbs:.2f} GB/s (best of 8) / weight_stream {DEFAULT.weight_stream}"},
        "tflops": {"fp32": {"value": round(tflops / DEFAULT.gemm, 5), "source":
                            f"{src}: 512^3 fp32 torch.mm at {tflops * 1e3:.1f} GFLOP/s (best of 30) / gemm {DEFAULT.gemm}"}},
        "gpus_per_node": {"value": t["cpus"], "source": "os.cpu_count(): ranks of one machine share memory"},
        "scaleup_gbs": {"value": round(gbs / 2, 2), "source": f"{src}: half the copy bandwidth (gloo over loopback copies twice)"},
        "scaleup_latency_us": {"value": 300, "source": "estimate, not measured: one gloo collective over loopback"},
        "scaleout_gbs": {"value": 1.25, "source": "estimate, not measured: 10 Gb/s Ethernet between machines"},
        "scaleout_latency_us": {"value": 500, "source": "estimate, not measured: gloo over TCP between machines"},
        "layer_overhead_us": {"value": 0, "source": "CPU kernels run on the calling thread: nothing overlaps (see graph_layer_overhead_us)"},
        "graph_layer_overhead_us": {"value": 0, "source": "set below from the layer measurement"},
        "step_overhead_ms": {"value": 0, "source": "set below from the engine measurement"},
        "seq_overhead_us": {"value": 0, "source": "set below from the engine measurement"},
        "expert_overhead_us": {"value": 0, "source": "set below from the engine measurement"},
        "gemm_tile_rows": {"value": 1, "source": "CPU GEMM libraries (oneDNN, MKL) have no tensor-core tile: a row costs a row"},
        "card_class": {"value": "cpu", "source": "a CPU: oneDNN/MKL GEMMs have no tensor-core tile and reach the measured rate at any row count"},
        "allreduce_latency_us": {"value": 300, "source": "estimate, not measured: one gloo collective over loopback"},
        "scaleout_allreduce_latency_us": {"value": 300, "source": "estimate, not measured: one gloo collective over "
                                          "loopback (one host: nothing crosses a node)"},
        "gemm_min_tile_rows": {"value": 1, "source": "CPU GEMM libraries (oneDNN, MKL) have no tensor-core tile: a row costs a row"},
        "kernel_floor_us": {"value": 0, "source": "CPU kernels run on the calling thread, no graphs: the fixed costs are graph_layer_overhead_us and step_overhead_ms"},
        "host_memory_gb": {"value": 0, "source": "a CPU rank's weights are in host memory already: nothing to offload to"},
        "host_link_gbs": {"value": 0, "source": "a CPU rank's weights are in host memory already: no host link"},
    }
    if t.get("gemm_bf16_tflops"):  # what `moeserve serve --dtype bfloat16` runs on (oneDNN: AVX512-BF16/AMX or emulated)
        bf16 = t["gemm_bf16_tflops"]
        data["tflops"]["bf16"] = {"value": round(bf16 / DEFAULT.gemm, 5), "source":
                                  f"{src}: 512^3 bf16 torch.mm at {bf16 * 1e3:.1f} GFLOP/s (best of 30) / gemm {DEFAULT.gemm}"}
    model = load_model(None)
    prec = Precision("fp32", "fp32", "fp32")

    def modeled(s: StepInput, whole_step: bool) -> float:
        sm = StepModel(model, from_dict(data, "calibration"), Layout(), prec)
        if whole_step:
            return sm.step(s).total
        parts, _ = sm.layer(s, moe=True)
        return sum(parts.values())

    layer_s, steps = t["layer_s"], {int(b): v for b, v in t["steps"].items()}
    layer_fixed = max(0.0, layer_s - modeled(StepInput("decode", 1, 64, 1), False))
    data["graph_layer_overhead_us"] = {"value": round(layer_fixed * 1e6, 1), "source": (
        f"{src}: one built-in MoE decoder layer at 1 token took {layer_s * 1e6:.0f} us (median of 200); this is "
        "that minus its roofline time: Python and operator dispatch")}
    # what the modeled layers leave of each measured step = fixed + per sequence + per active expert
    rows, rest = [], []
    for b, step in sorted(steps.items()):
        rest.append(step - modeled(StepInput("decode", b, 24, b), True))
        active = model.num_experts * (1 - (1 - 1 / model.num_experts) ** (b * model.top_k)) * model.num_moe_layers
        rows.append([1.0, b, active])
    coef = _nonnegative_fit(np.array(rows), np.array(rest))
    note = (f"{src}: decode steps of the built-in model in moeserve's engine took "
            + ", ".join(f"{v * 1e3:.2f} ms at {b}" for b, v in sorted(steps.items()))
            + " sequences (40- minus 8-token runs); what the modeled layers leave, fitted as fixed + per sequence + per active expert")
    data["step_overhead_ms"] = {"value": round(float(coef[0]) * 1e3, 3), "source": note}
    data["seq_overhead_us"] = {"value": round(float(coef[1]) * 1e6, 1), "source": note}
    data["expert_overhead_us"] = {"value": round(float(coef[2]) * 1e6, 1), "source": note}
    return data


def _nonnegative_fit(a, y):
    """Least squares a @ x = y with x >= 0: drop the most negative coefficient until none is."""
    import numpy as np

    keep = list(range(a.shape[1]))
    while True:
        x, *_ = np.linalg.lstsq(a[:, keep], y, rcond=None)
        if (x >= 0).all() or len(keep) == 1:
            out = np.zeros(a.shape[1])
            out[keep] = np.maximum(x, 0)
            return out
        keep.pop(int(np.argmin(x)))


def write_profile(path: str) -> str:
    import yaml

    data = profile_from(measure())
    header = ("# CPU profile written by `moeserve configure --calibrate`; every number says how it was measured.\n"
              "# Use it with `moeserve configure --hardware THIS_FILE`.\n")
    with open(path, "w") as f:
        f.write(header + yaml.safe_dump(data, sort_keys=False, width=200))
    rates = ", ".join(f"{fmt} GEMM {entry['source'].split(' at ')[1].split(' (')[0]}" for fmt, entry in data["tflops"].items())
    return (f"wrote {path}: {rates}, "
            f"layer fixed cost {data['graph_layer_overhead_us']['value']} us, step fixed cost "
            f"{data['step_overhead_ms']['value']} ms + {data['seq_overhead_us']['value']} us per sequence + "
            f"{data['expert_overhead_us']['value']} us per active expert")
