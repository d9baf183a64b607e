"""Accelerator profiles: YAML files under hardware/, every number given with its source.

A profile file maps each field below to `{value: NUMBER, source: "where it comes from"}`
(`tflops` maps each number format to such a pair). `moeserve configure --calibrate` writes one for
the machine it runs on. Bandwidths are per GPU and per direction.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_DIR = Path(__file__).with_name("hardware")
_NUMBERS = ("memory_gb", "memory_bandwidth_gbs", "gpus_per_node", "scaleup_gbs", "scaleup_latency_us",
            "scaleout_gbs", "scaleout_latency_us", "layer_overhead_us", "graph_layer_overhead_us", "step_overhead_ms",
            "seq_overhead_us", "expert_overhead_us", "gemm_tile_rows")


@dataclass(frozen=True)
class Hardware:
    name: str
    memory_gb: float  # per GPU (GB = 1e9 bytes)
    memory_bandwidth_gbs: float  # HBM, GB/s
    tflops: dict  # dense tensor-core peak per compute format: fp4, fp8, bf16, fp32
    gpus_per_node: int  # the scale-up (NVLink) domain
    scaleup_gbs: float  # NVLink per GPU per direction, GB/s
    scaleup_latency_us: float  # one dispatch or combine phase inside the domain
    scaleout_gbs: float  # InfiniBand/RoCE per GPU per direction, GB/s
    scaleout_latency_us: float  # one dispatch or combine phase across nodes
    layer_overhead_us: float  # kernel launches of one layer, eager
    graph_layer_overhead_us: float  # the same, replayed from a CUDA graph
    step_overhead_ms: float  # per engine step: scheduling, sampling, host-device copies
    seq_overhead_us: float  # per sequence in a step: the host work that grows with the batch
    expert_overhead_us: float  # per expert with work in a MoE layer: calls the grouped GEMM does not fuse
    gemm_tile_rows: int  # a GEMM of M rows costs the FLOPs of at least this many (tensor-core tile height)
    sources: dict  # field -> source text

    def peak_flops(self, fmt: str) -> float:
        """FLOP/s of `fmt`; a format the chip lacks runs at the next wider one it has."""
        for f in {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16"), "bf16": ("bf16",), "fp32": ("fp32",)}[fmt]:
            if self.tflops.get(f):
                return self.tflops[f] * 1e12
        raise ValueError(f"hardware {self.name} has no {fmt} peak")


def known_profiles() -> list[str]:
    return sorted(p.stem for p in _DIR.glob("*.yaml"))


def _number(entry, field: str, origin: str) -> tuple[float, str]:
    if not isinstance(entry, dict) or "value" not in entry or not entry.get("source"):
        raise ValueError(f"{origin}: {field} must be {{value: NUMBER, source: TEXT}}, got {entry!r}")
    value = entry["value"]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{origin}: {field} must be a number >= 0, got {value!r}")
    return float(value), str(entry["source"])


def from_dict(data: dict, origin: str) -> Hardware:
    missing = [f for f in (*_NUMBERS, "tflops") if f not in data]
    if missing:
        raise ValueError(f"{origin}: missing {missing}")
    values, sources = {}, {}
    for field in _NUMBERS:
        values[field], sources[field] = _number(data[field], field, origin)
    tflops = {}
    for fmt, entry in data["tflops"].items():
        tflops[fmt], sources[f"tflops.{fmt}"] = _number(entry, f"tflops.{fmt}", origin)
    values["gpus_per_node"] = int(values["gpus_per_node"])
    values["gemm_tile_rows"] = max(1, int(values["gemm_tile_rows"]))
    return Hardware(name=str(data.get("name", origin)), tflops=tflops, sources=sources, **values)


def load_hardware(name_or_path: str) -> Hardware:
    """A shipped profile by name (h100, ...) or a YAML file path."""
    import yaml

    path = Path(name_or_path)
    if not path.suffix and (_DIR / f"{name_or_path.lower()}.yaml").exists():
        path = _DIR / f"{name_or_path.lower()}.yaml"
    if not path.is_file():
        raise ValueError(f"--hardware {name_or_path}: not a profile file nor a known name "
                         f"({', '.join(known_profiles())})")
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a hardware profile is a mapping of field: {{value, source}}")
    return from_dict(data, str(path.name))
