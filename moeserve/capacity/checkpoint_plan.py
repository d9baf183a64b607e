"""How a checkpoint's formats become `moeserve configure`'s defaults: every explicit format flag wins, the
KV cache follows --engine's default for the checkpoint (engine_kv.py) or, without --engine, the format the
checkpoint declares (what TensorRT-LLM runs), and the line configure prints says which formats came from
where. Applied on GPUs only, and not with --emit (which plans in what moeserve serve runs the checkpoint in:
served.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from moeserve.capacity.checkpoint_formats import CheckpointFormats
from moeserve.capacity.engine_kv import ENGINE_NAMES, KV_FLAG_DEFAULTS, KV_FLAGS, default_kv_by_engine
from moeserve.capacity.layout import Precision

# configure's format flags: (argparse dest, Precision field, what it sets)
WEIGHT_FLAGS = (("attn_weights", "attn", "attention"), ("moe_weights", "moe", "experts"),
                ("dense_weights", "dense", "dense"), ("mtp_weights", "mtp", "MTP"))

# Precision field -> its name in --json's "precision"
FIELDS = {"attn": "attention_weights", "moe": "moe_weights", "dense": "dense_weights", "mtp": "mtp_weights", "kv": "kv"}


@dataclass(frozen=True)
class CheckpointPlan:
    """formats: the checkpoint's; defaults: the Precision fields they set (empty when not applied);
    kv_by_engine: the KV format each engine runs the checkpoint in by default; engine: --engine; flags: the
    format flags given; applied: False on a CPU profile and with --emit, which plan in what moeserve runs."""
    formats: CheckpointFormats
    defaults: dict
    kv_by_engine: dict
    engine: str | None
    flags: dict = field(default_factory=dict)
    applied: bool = True
    why_not: str = ""

    @property
    def kv(self) -> str | None:
        """The KV format the plan takes from the checkpoint: --engine's default, else the declared one."""
        return self.kv_by_engine[self.engine] if self.engine else self.formats.kv or self.kv_by_engine["trtllm"]

    def overridden(self) -> list[str]:
        """The format flags given, as typed."""
        return [f"--{dest.replace('_', '-')} {self.flags[dest]}" for dest in ("weights", *(d for d, _, _ in WEIGHT_FLAGS),
                                                                            "kv_dtype") if self.flags.get(dest)]

    def differs_from(self, prec: Precision) -> bool:
        """Whether the checkpoint's formats are not the ones `prec` plans in."""
        f = self.formats
        return bool(f.problem) or (f.attention, f.experts, f.dense or f.experts, f.mtp or f.experts, self.kv) != (
            prec.attn_weights, prec.moe_weights, prec.dense_weights, prec.mtp or prec.moe_weights, prec.kv)

    def runs_in(self) -> str:
        """The checkpoint's formats and the file they are read from, in a few words."""
        f = self.formats
        return f.problem or f"{f.describe(self.kv)} ({f.source.split(':')[0]})"

    def note(self, prec: Precision) -> str:
        """The line configure prints: the checkpoint's formats, where they were read, and the flags that replace
        them (or why they are not planned in)."""
        f = self.formats
        what = f.problem or f.describe(None if f.kv_problem else self.kv)
        text = f"checkpoint formats: {what}{'; ' + f.kv_problem if f.kv_problem else ''} ({f.source})"
        if self.formats.mixed:
            text += f"; mixed: {'; '.join(self.formats.mixed)}"
        flags = self.overridden()
        if not self.applied:
            given = f" (flags given: {', '.join(flags)})" if flags else ""
            return text + (f"; not planned in: {self.why_not}{given}" if self.differs_from(prec) else "")
        return text + (f"; flags given: {', '.join(flags)}" if flags else "")

    def kv_note(self) -> str | None:
        """What each engine runs the KV cache in by default, when they differ and no --kv-dtype says."""
        by_format: dict[str, list[str]] = {}
        for engine, fmt in self.kv_by_engine.items():
            by_format.setdefault(fmt, []).append(ENGINE_NAMES[engine])
        if not self.applied or self.flags.get("kv_dtype") or len(by_format) == 1:
            return None
        runs = ", ".join(f"{' and '.join(names)} {'run' if len(names) > 1 else 'runs'} {fmt}"
                         for fmt, names in sorted(by_format.items(), key=lambda item: -len(item[1])))
        lead = (f"KV cache planned {self.kv}, {ENGINE_NAMES[self.engine]}'s default for this checkpoint" if self.engine
                else f"KV cache planned {self.formats.kv}, as the checkpoint declares")
        flags = ", ".join(KV_FLAGS[e] for e in self.kv_by_engine)
        odd = [f"{ENGINE_NAMES[e]}'s {KV_FLAG_DEFAULTS[e]}" for e in self.kv_by_engine if KV_FLAG_DEFAULTS[e] != "auto"]
        default = f"its default (auto; {'; '.join(odd)})" if odd else "auto"
        return (f"{lead}: with the KV dtype left at {default}, {runs} ({flags} set it)"
                + ("" if self.engine else "; --engine plans one engine's default"))

    def as_dict(self, prec: Precision) -> dict:
        f = self.formats
        return {"source": f.source, "applied": self.applied,
                "formats": {"attention_weights": f.attention, "moe_weights": f.experts, "dense_weights": f.dense,
                            "mtp_weights": f.mtp or f.experts, "kv": self.kv, "kv_declared": f.kv},
                "from_checkpoint": [FIELDS[k] for k in ("attn", "moe", "dense", "mtp", "kv") if k in self.defaults],
                "flags": self.overridden(),
                "kv_by_engine": self.kv_by_engine, "kv_engine": self.engine,
                "problem": f.problem or f.kv_problem or None, "mixed": list(f.mixed), "note": self.note(prec)}


def checkpoint_plan(formats: CheckpointFormats, flags: dict, engine: str | None, mla: bool, act: str,
                    gpu: bool, emit: bool, engines: tuple[str, ...] | None = None) -> CheckpointPlan:
    """The defaults `formats` give configure. flags: the format flags by argparse dest (weights, attn_weights,
    moe_weights, dense_weights, mtp_weights, kv_dtype; None when not given); act: the activation format;
    gpu: the hardware has FP8 tensor cores; emit: --emit; engines: those the card runs (engine_kv.engines_for).
    ValueError for a checkpoint whose formats configure cannot plan in and the flags do not replace."""
    kv_by_engine = default_kv_by_engine(None if formats.kv_problem else formats.kv, formats.kv_producer, mla, act,
                                        engines)
    why_not = "" if gpu and not emit else (
        "--emit plans in what moeserve serve runs" if emit else f"a CPU profile plans in {act}, what moeserve runs on CPUs")
    plan = CheckpointPlan(formats, {}, kv_by_engine, engine, dict(flags), not why_not, why_not)
    if why_not:
        return plan
    weights_given = flags.get("weights") or all(flags.get(d) for d in ("attn_weights", "moe_weights", "dense_weights"))
    if formats.problem and not weights_given:
        raise ValueError(f"{formats.source}: {formats.problem}: pass --weights (fp4, fp8, bf16, fp16, fp32), or --attn-weights, "
                         "--moe-weights and --dense-weights, to plan it in formats configure knows")
    if formats.kv_problem and not flags.get("kv_dtype"):
        raise ValueError(f"{formats.source}: {formats.kv_problem}: pass --kv-dtype to plan it")
    defaults = {}
    if not flags.get("weights") and not formats.problem:
        module = {"attn": formats.attention, "moe": formats.experts, "dense": formats.dense, "mtp": formats.mtp}
        defaults = {p: module[p] for d, p, _ in WEIGHT_FLAGS if module[p] and not flags.get(d)}
        defaults["weights"] = formats.experts
    if not flags.get("kv_dtype") and not formats.kv_problem:
        defaults["kv"] = plan.kv
    return CheckpointPlan(formats, defaults, kv_by_engine, engine, dict(flags))
