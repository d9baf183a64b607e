"""Accelerator profiles: YAML files under hardware/, every number given with its source.

A profile file maps each field below to `{value: NUMBER, source: "where it comes from"}`
(`tflops` maps each number format to such a pair; `card_class` is `{value: NAME, source}`).
`moeserve configure --calibrate` writes one for the machine it runs on. Bandwidths are per GPU and
per direction. The fields after `gemm_tile_rows` are optional in a profile of your own: a missing
one takes the default in `_OPTIONAL`, and its source says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

_DIR = Path(__file__).with_name("hardware")
_NUMBERS = ("memory_gb", "memory_bandwidth_gbs", "gpus_per_node", "scaleup_gbs", "scaleup_latency_us",
            "scaleout_gbs", "scaleout_latency_us", "layer_overhead_us", "graph_layer_overhead_us", "step_overhead_ms",
            "seq_overhead_us", "expert_overhead_us", "gemm_tile_rows")
# optional fields: default value, or the name of the field whose value they default to
_OPTIONAL = {
    "gemm_min_tile_rows": "gemm_tile_rows",
    "kernel_floor_us": 0.0,
    "allreduce_latency_us": "scaleup_latency_us",
    "scaleout_allreduce_latency_us": "scaleout_latency_us",
    "host_memory_gb": 0.0,
    "host_link_gbs": 0.0,
}
CARD_CLASSES = ("hopper", "hopper_h20", "blackwell", "cdna3", "cdna4", "cpu")
_DIVISORS = ("memory_bandwidth_gbs", "scaleup_gbs", "scaleout_gbs")  # times are bytes over them: 0 divided by zero
MAX_PROFILE_BYTES = 1 << 20  # a profile is a few KB


@dataclass(frozen=True)
class Hardware:
    name: str
    memory_gb: float  # per GPU (GB = 1e9 bytes): what the device reports (nvidia-smi, rocm-smi), not the datasheet's GiB
    memory_bandwidth_gbs: float  # HBM, GB/s
    tflops: dict  # dense tensor-core peak per compute format: fp4, fp8, bf16, fp32
    gpus_per_node: int  # the scale-up (NVLink) domain
    scaleup_gbs: float  # NVLink per GPU per direction, GB/s
    scaleup_latency_us: float  # one dispatch or combine phase inside the domain
    scaleout_gbs: float  # InfiniBand/RoCE per GPU per direction, GB/s
    scaleout_latency_us: float  # one dispatch or combine phase across nodes
    layer_overhead_us: float  # host time to issue DeepSeek-V3's mean layer eager (others by their operators, step_time.HOST_OPS)
    graph_layer_overhead_us: float  # fixed time per layer beyond its kernels (CPU: Python and operator dispatch)
    step_overhead_ms: float  # per engine step: scheduling, sampling, host-device copies
    seq_overhead_us: float  # per sequence in a step: the host work that grows with the batch
    expert_overhead_us: float  # per expert with work in a MoE layer: calls the grouped GEMM does not fuse
    gemm_tile_rows: int  # the largest row tile of the GEMM kernels (block M)
    sources: dict  # field -> source text
    gemm_min_tile_rows: int = 0  # the smallest row tile they offer (WGMMA's 64 on Hopper; swapAB kernels 32)
    kernel_floor_us: float = 0.0  # the least a dependent kernel takes inside a CUDA graph, launch to finish
    allreduce_latency_us: float = 0.0  # a TP all-reduce of a few KB (one-shot custom all-reduce)
    scaleout_allreduce_latency_us: float = 0.0  # the same across nodes (NCCL over the scale-out link)
    host_memory_gb: float = 0.0  # host memory per GPU that weights may be offloaded to
    host_link_gbs: float = 0.0  # host-to-GPU bandwidth per GPU per direction (PCIe, NVLink-C2C)
    card_class: str = "hopper"  # which published GEMM-efficiency curve applies (capacity/gemm.py)

    def peak_flops(self, fmt: str) -> float:
        """FLOP/s of `fmt`; a format the chip lacks runs at the next wider one it has, except FP4 weights, which
        a chip without FP4 tensor cores multiplies in BF16 (W4A16: the kernels dequantize the 4-bit weights in
        registers, as vLLM's MXFP4 and NVFP4 MoE backends do on Hopper: Triton's matmul_ogs, Marlin, FlashInfer's
        MXFP4 x BF16; vllm/model_executor/layers/quantization/mxfp4.py get_mxfp4_backend)."""
        for f in {"fp4": ("fp4", "bf16"), "fp8": ("fp8", "bf16"), "bf16": ("bf16",), "fp32": ("fp32",)}[fmt]:
            if self.tflops.get(f):
                return self.tflops[f] * 1e12
        raise ValueError(f"hardware {self.name} has no {fmt} peak")

    def has_tensor_format(self, fmt: str) -> bool:
        return bool(self.tflops.get(fmt))

    def gemm_tiles(self) -> list[int]:
        """Row tiles the GEMM kernels choose from: powers of two from the smallest to the largest."""
        lo, hi = max(1, self.gemm_min_tile_rows or self.gemm_tile_rows), max(1, self.gemm_tile_rows)
        tiles, t = [], lo
        while t < hi:
            tiles.append(t)
            t *= 2
        return tiles + [hi]


def known_profiles() -> list[str]:
    return sorted(p.stem for p in _DIR.glob("*.yaml"))


def _number(entry, field: str, origin: str) -> tuple[float, str]:
    if not isinstance(entry, dict) or "value" not in entry or not entry.get("source"):
        raise ValueError(f"{origin}: {field} must be {{value: NUMBER, source: TEXT}}, got {str(entry)[:60]}")
    value, source = entry["value"], entry["source"]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{origin}: {field} must be a finite number >= 0, got {str(value)[:40]}")
    if field in _DIVISORS and value == 0:
        raise ValueError(f"{origin}: {field} must be more than 0")
    if not isinstance(source, (str, int, float)):
        raise ValueError(f"{origin}: {field}'s source must be text")
    return float(value), str(source)


def from_dict(data: dict, origin: str) -> Hardware:
    missing = [f for f in (*_NUMBERS, "tflops") if f not in data]
    if missing:
        raise ValueError(f"{origin}: missing {missing}")
    unknown = sorted(set(data) - {"name", "card_class", "tflops", *_NUMBERS, *_OPTIONAL}, key=str)
    if unknown:  # a misspelt optional field was ignored, its default used without a word
        raise ValueError(f"{origin}: unknown fields {unknown}; the fields are name, card_class, tflops, "
                         f"{', '.join((*_NUMBERS, *_OPTIONAL))}")
    values, sources = {}, {}
    for field in _NUMBERS:
        values[field], sources[field] = _number(data[field], field, origin)
    for field, default in _OPTIONAL.items():
        if field in data:
            values[field], sources[field] = _number(data[field], field, origin)
        else:
            values[field] = values[default] if isinstance(default, str) else default
            sources[field] = f"not in the profile: {'as ' + default if isinstance(default, str) else default}"
    if not isinstance(data["tflops"], dict) or not data["tflops"]:
        raise ValueError(f"{origin}: tflops must map formats (fp4, fp8, bf16, fp32) to {{value, source}}")
    tflops = {}
    for fmt, entry in data["tflops"].items():
        if fmt not in ("fp4", "fp8", "bf16", "fp32"):
            raise ValueError(f"{origin}: tflops.{fmt}: formats are fp4, fp8, bf16 and fp32")
        tflops[fmt], sources[f"tflops.{fmt}"] = _number(entry, f"tflops.{fmt}", origin)
    card = data.get("card_class", {"value": "hopper", "source": "not in the profile: hopper"})
    if not isinstance(card, dict) or card.get("value") not in CARD_CLASSES:
        raise ValueError(f"{origin}: card_class must be {{value: one of {', '.join(CARD_CLASSES)}, source}}, got {card!r}")
    sources["card_class"] = str(card.get("source", ""))
    for field in ("gpus_per_node", "gemm_tile_rows", "gemm_min_tile_rows"):  # counts: 0 or 7.5 was clamped or cut
        if values[field] < 1 or values[field] != int(values[field]):
            raise ValueError(f"{origin}: {field} must be a whole number >= 1, got {values[field]:g}")
        values[field] = int(values[field])
    values["gemm_min_tile_rows"] = min(values["gemm_min_tile_rows"], values["gemm_tile_rows"])
    return Hardware(name=str(data.get("name", origin)), tflops=tflops, sources=sources, card_class=card["value"], **values)


def load_hardware(name_or_path: str) -> Hardware:
    """A shipped profile by name (h100, ...) or a YAML file path."""
    import yaml

    class _NoAliases(yaml.SafeLoader):
        """A profile has no use for `*alias`: nine nested aliases of nine made str() of a `source`
        expand to 9**9 items (configure ran until killed)."""

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise ValueError(f"--hardware {name_or_path}: YAML aliases (*name) are not allowed in a profile")
            return super().compose_node(parent, index)

    path = Path(name_or_path)
    if not path.suffix and (_DIR / f"{name_or_path.lower()}.yaml").exists():
        path = _DIR / f"{name_or_path.lower()}.yaml"
    if not path.is_file():
        raise ValueError(f"--hardware {name_or_path}: not a profile file nor a known name "
                         f"({', '.join(known_profiles())})")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except OSError as e:  # unreadable (permissions, I/O): named, not a traceback
        raise ValueError(f"--hardware {path}: cannot read it: {e.strerror or e}") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise ValueError(f"--hardware {path}: larger than {MAX_PROFILE_BYTES} bytes, not a profile")
    try:
        data = yaml.load(raw.decode(), Loader=_NoAliases)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"--hardware {path}: not a YAML profile ({type(e).__name__})") from None
    except RecursionError:
        raise ValueError(f"--hardware {path}: nests too deep to be a profile") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a hardware profile is a mapping of field: {{value, source}}")
    return from_dict(data, str(path.name))
