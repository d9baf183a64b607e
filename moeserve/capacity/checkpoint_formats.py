"""The number formats a checkpoint runs in, read from its quantization description without loading a weight:
config.json's `quantization_config`, else a ModelOpt `hf_quant_config.json` beside it (vLLM and SGLang read
them in that order; ModelOpt writes the same description to both). `moeserve configure --model DIR` plans
in these unless a flag says otherwise (docs/capacity.md, "Formats from the checkpoint").

    quant_method "fp8" (DeepSeek-V3/R1, Qwen3 -FP8, Kimi K2: block FP8, weight_block_size): every linear
        layer fp8, but modules_to_not_convert / ignored_layers
    quant_method "modelopt", or hf_quant_config.json "quantization": quant_algo (FP8, NVFP4, ...;
        MIXED_PRECISION: each module's own in quantized_layers), exclude_modules / ignore,
        kv_cache_quant_algo / kv_cache_scheme
    quant_method "compressed-tensors": config_groups (weights num_bits and type, targets), ignore,
        kv_cache_scheme
    quant_method "mxfp4" (gpt-oss): routed experts fp4, the rest unquantized
    compressed-tensors int 4 weights with unquantized activations: int4 (W4A16, Kimi K2-Thinking / K2.5)
    quant_method "gptq", "awq" with bits 4: int4 (W4A16), but modules_to_not_convert and dynamic exclusions
    none: every module in torch_dtype

A module left unquantized is in the checkpoint's torch_dtype. Each of configure's modules (attention
projections, routed experts, dense MLPs with shared experts, the MTP layer) gets the format that holds
most of its weights, over every layer; a module split between formats is named in `mixed`. Weights in
a format configure does not plan in (int8, W4A8, 3- or 8-bit GPTQ, ...) or another quant_method are not an
error here: `problem` says which, and the caller refuses them unless flags set every format.
"""
from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import regex

from moeserve.capacity.dtypes import BYTES, TORCH_NAMES
from moeserve.capacity.engine_kv import PRODUCERS
from moeserve.capacity.model_spec import ModelSpec, config_path, moe_layer_indices, read_json_object
from moeserve.capacity.module_names import MODULES, module_weights

MAX_PATTERNS = 65_536  # entries of an exclude / ignore / targets list (a DeepSeek exclude list has a few hundred)
MAX_WILDCARDS = 4_096  # of them glob or regular-expression patterns, each tried on every module name
MAX_PATTERN_CHARS = 1_024
# seconds one re: pattern may take on one module name: Python's `re` has no timeout, and a nested quantifier
# ("(\w+)+x") backtracks exponentially in the name's length, so re: patterns run on the `regex` engine, which
# takes a timeout (and needs none of that backtracking for most such patterns)
REGEX_TIMEOUT_S = 1.0
MAX_GROUPS = 256  # compressed-tensors config_groups
TORCH_DTYPES = {torch: fmt for fmt, torch in TORCH_NAMES.items()}
# ModelOpt quant_algo -> format (weight bytes decide the plan; W4A16 / W4A8 variants of NVFP4 and MXFP4 keep
# 4-bit float weights, MXFP4 with its scale per 32 values). Any other algorithm (W4A8_AWQ, W4A16_AWQ, INT8, INT4, ...)
# is named as it is.
MODELOPT_ALGOS = {"FP8": "fp8", "FP8_PB_WO": "fp8", "FP8_BLOCK_SCALES": "fp8", "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
                  "MXFP8": "fp8", "NVFP4": "fp4", "W4A16_NVFP4": "fp4", "W4A8_NVFP4_FP8": "fp4", "MXFP4": "mxfp4",
                  "W4A16_MXFP4": "mxfp4", "W4A8_MXFP4_FP8": "mxfp4"}
UNQUANTIZED_ALGOS = (None, "", "NONE", "NULL")


@dataclass(frozen=True)
class CheckpointFormats:
    """A checkpoint's formats. attention/experts/dense: configure's modules (None when `problem`); mtp: the
    MTP layer's format where it differs from the main model's modules (None: the same, or no MTP layer);
    kv: the KV format the checkpoint declares (None: none), through `kv_producer` (engine_kv.PRODUCERS);
    source: the file and fields it was read from."""
    source: str
    attention: str | None
    experts: str | None
    dense: str | None
    mtp: str | None = None
    kv: str | None = None
    kv_producer: str = "modelopt"
    problem: str = ""  # the weights are in a format configure does not plan in
    kv_problem: str = ""  # the KV cache is declared in a format configure does not plan in
    mixed: tuple[str, ...] = ()

    def describe(self, kv: str | None) -> str:
        parts = {k: v for k, v in (("attention", self.attention), ("experts", self.experts), ("dense", self.dense)) if v}
        text = (f"weights {self.experts}" if len(set(parts.values())) == 1 else
                ", ".join(f"{k} {v}" for k, v in parts.items()))
        return text + (f", MTP {self.mtp}" if self.mtp else "") + (f", KV {kv}" if kv else "")


def read_checkpoint(source: str | None, model: ModelSpec) -> CheckpointFormats | None:
    """The formats of the checkpoint --model names; None for a shipped model name or the built-in model
    (which have no checkpoint on this machine). ValueError naming the file and field it cannot read."""
    if source is None:
        return None
    path, shipped = config_path(source)
    if shipped:
        return None
    cfg = read_json_object(path, source)
    sidecar = modelopt_sidecar(path, cfg)
    hf_quant = read_json_object(sidecar, source) if sidecar else None
    try:
        return checkpoint_formats(cfg, hf_quant, model)
    except ValueError as e:
        raise ValueError(f"--model {source}: {e}") from None


def modelopt_sidecar(path: Path, cfg: dict) -> Path | None:
    """The ModelOpt hf_quant_config.json beside config.json `path` (holding `cfg`) that describes the checkpoint:
    None where there is none, or where config.json has its own quantization_config (read first)."""
    sidecar = path.with_name("hf_quant_config.json")
    return sidecar if "quantization_config" not in cfg and sidecar.is_file() else None


def checkpoint_formats(cfg: dict, hf_quant: dict | None, model: ModelSpec) -> CheckpointFormats:
    """The formats of a checkpoint from its config.json `cfg` and hf_quant_config.json `hf_quant` (None:
    absent); `model` is `cfg` read by model_spec.from_hf_config."""
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    plain = TORCH_DTYPES.get(dtype, "bf16") if isinstance(dtype, str) else "bf16"
    modules = module_weights(cfg, model, moe_layer_indices(cfg))
    quant = cfg.get("quantization_config")
    if quant == {}:  # an empty description is none, as moeserve serve reads it (models/quantization.py)
        quant = None
    if quant is None and hf_quant is not None:
        section = hf_quant.get("quantization")
        _expect(isinstance(section, dict), "hf_quant_config.json: quantization must be an object (quant_algo, ...)")
        return _modelopt(section, "hf_quant_config.json quantization", plain, modules)
    if quant is None:
        return _build(f"config.json: no quantization_config, torch_dtype {str(dtype)[:20]}", lambda name: plain, modules)
    _expect(isinstance(quant, dict), "config.json: quantization_config must be an object (quant_method, ...)")
    method = quant.get("quant_method")
    where = "config.json quantization_config"
    if not isinstance(method, str) or len(method) > 64:
        return CheckpointFormats(f"{where}: no quant_method", None, None, None,
                                 problem="a quantization_config without a quant_method is not a scheme configure reads")
    if method == "fp8":
        return _block_fp8(quant, where, plain, modules)
    if method.startswith("modelopt"):
        section = quant.get("quantization", quant)
        _expect(isinstance(section, dict), f"{where}.quantization must be an object")
        return _modelopt(section, where + ("" if section is quant else ".quantization"), plain, modules)
    if method.replace("_", "-") == "compressed-tensors":
        return _compressed_tensors(quant, where, plain, modules)
    if method == "mxfp4":
        return _build(f"{where}: quant_method mxfp4", lambda name: "mxfp4" if ".experts." in name else plain, modules)
    if method in ("gptq", "awq"):
        return _gptq_awq(quant, method, where, plain, modules)
    return CheckpointFormats(f"{where}: quant_method {method}", None, None, None,
                             problem=f"quant_method {method!r} is not a scheme configure reads (it reads fp8, "
                             "modelopt, compressed-tensors, mxfp4, gptq and awq)")


def _block_fp8(quant: dict, where: str, plain: str, modules: dict) -> CheckpointFormats:
    kept = _Patterns(_strings(quant, "modules_to_not_convert", where) + _strings(quant, "ignored_layers", where),
                     f"{where}.modules_to_not_convert", substring=True)
    block = quant.get("weight_block_size")
    fields = "quant_method fp8" + (f", weight_block_size {block}" if isinstance(block, list) and len(block) <= 4 else "")
    return _build(f"{where}: {fields}", lambda name: plain if name in kept else "fp8", modules)


def _modelopt(section: dict, where: str, plain: str, modules: dict) -> CheckpointFormats:
    algo = section.get("quant_algo")
    _expect(algo is None or isinstance(algo, str) and len(algo) <= 64, f"{where}.quant_algo must be a name")
    algo = (algo or "").upper()
    excluded = _Patterns(_strings(section, "exclude_modules", where) + _strings(section, "ignore", where),
                         f"{where}.exclude_modules", substring=True)
    kv, kv_problem, kv_field = _modelopt_kv(section)
    fields = f"quant_algo {algo or 'none'}" + (f", exclude_modules ({len(excluded)})" if len(excluded) else "") + kv_field
    if algo == "MIXED_PRECISION":
        layers = section.get("quantized_layers")
        _expect(isinstance(layers, dict) and len(layers) <= 1 << 20, f"{where}.quantized_layers must be an object")

        def fmt(name: str) -> str:
            entry = next((layers[p] for p in _prefixes(name) if p in layers), None)
            inner = entry.get("quant_algo") if isinstance(entry, dict) else None
            return plain if name in excluded or inner in UNQUANTIZED_ALGOS else _modelopt_format(str(inner))
        fields += f", quantized_layers ({len(layers)})"
    else:
        quantized = plain if algo in UNQUANTIZED_ALGOS else _modelopt_format(algo)

        def fmt(name: str) -> str:
            return plain if name in excluded else quantized
    return _build(f"{where}: {fields}", fmt, modules, kv, "modelopt", kv_problem)


def _modelopt_kv(section: dict) -> tuple[str | None, str, str]:
    """(declared KV format, problem, field description) of a ModelOpt description: kv_cache_quant_algo, or the
    kv_cache_scheme newer exports write to config.json."""
    algo = section.get("kv_cache_quant_algo")
    if algo is None and "kv_cache_scheme" in section:
        scheme = section["kv_cache_scheme"]
        if isinstance(scheme, dict):  # type and num_bits compared, not hashed: a file may hold a list there
            kind, bits = scheme.get("type"), scheme.get("num_bits")
            algo = ("FP8" if (kind, bits) == ("float", 8) else "NVFP4" if (kind, bits) == ("float", 4)
                    else f"{str(kind)[:20]}{str(bits)[:20]}")
        else:
            algo = scheme
        field = "kv_cache_scheme"
    else:
        field = "kv_cache_quant_algo"
    if isinstance(algo, str) and algo.strip().upper() in UNQUANTIZED_ALGOS:
        algo = None
    if algo is None:
        return None, "", ""
    name = str(algo)[:40].upper()
    kv = {"FP8": "fp8", "NVFP4": "fp4"}.get(name)
    problem = "" if kv else f"{field} {name} is not a KV format configure plans in (fp8, fp4)"
    return kv, problem, f", {field} {name}"


def _modelopt_format(algo: str) -> str:
    return MODELOPT_ALGOS.get(algo.upper(), algo.lower()[:40])


def _compressed_tensors(quant: dict, where: str, plain: str, modules: dict) -> CheckpointFormats:
    groups = quant.get("config_groups") or {}
    _expect(isinstance(groups, dict) and len(groups) <= MAX_GROUPS, f"{where}.config_groups must be an object")
    ignored = _Patterns(_strings(quant, "ignore", where), f"{where}.ignore", substring=False)
    rules = []
    for name, group in groups.items():
        _expect(isinstance(group, dict), f"{where}.config_groups.{str(name)[:40]} must be an object")
        targets = _Patterns(_strings(group, "targets", f"{where}.config_groups.{name}"),
                            f"{where}.config_groups.{name}.targets", substring=False)
        rules.append((targets, _ct_format(group.get("weights"), plain, group.get("input_activations"))))
    scheme = quant.get("kv_cache_scheme")
    kv, kv_problem = None, ""
    if scheme is not None:
        bits = (scheme.get("type"), scheme.get("num_bits")) if isinstance(scheme, dict) else (str(scheme)[:20], None)
        kv = "fp8" if bits == ("float", 8) else None
        kv_problem = "" if kv else f"kv_cache_scheme {bits[0]}{bits[1] or ''} is not a KV format configure plans in (fp8)"

    def fmt(name: str) -> str:
        # a target naming the module (its name or a re: pattern) wins over the class name "Linear", whatever the
        # groups' order (compressed-tensors' match_targets and vLLM's find_matched_target try names first)
        if name in ignored:
            return plain
        return next((f for targets, f in rules if name in targets),
                    next((f for targets, f in rules if "Linear" in targets.literal), plain))
    formats = "/".join(sorted({f for _, f in rules})) or "none"
    fields = (f"quant_method compressed-tensors, format {str(quant.get('format'))[:40]}, config_groups ({len(rules)}: "
              f"{formats})" + (f", ignore ({len(ignored)})" if len(ignored) else "")
              + (f", kv_cache_scheme {'fp8' if kv else 'other'}" if scheme is not None else ""))
    return _build(f"{where}: {fields}", fmt, modules, kv, "compressed-tensors", kv_problem)


def _gptq_awq(quant: dict, method: str, where: str, plain: str, modules: dict) -> CheckpointFormats:
    """GPTQ and AutoAWQ checkpoints: integer weights of `bits` (AWQ's `w_bit`) with 16-bit activations, 4 bits
    being int4 (W4A16: vLLM and SGLang run them on Marlin's kernels, gptq_marlin / awq_marlin), every linear
    layer but `modules_to_not_convert` (substrings, as vLLM reads them) and GPTQModel's `dynamic` exclusions
    ("-:REGEX"); a `dynamic` override ("+:REGEX" or a bare REGEX) with its own `bits` takes those."""
    bits = quant.get("bits", quant.get("w_bit"))
    _expect(isinstance(bits, int) and not isinstance(bits, bool), f"{where}.bits must be an integer")
    quantized = f"int{bits}" if 0 < bits <= 16 else "int?"
    kept = _Patterns(_strings(quant, "modules_to_not_convert", where), f"{where}.modules_to_not_convert",
                     substring=True)
    dynamic = quant.get("dynamic") or {}
    _expect(isinstance(dynamic, dict) and len(dynamic) <= MAX_PATTERNS, f"{where}.dynamic must be an object")
    excluded, overrides = [], []
    for key, value in dynamic.items():
        _expect(isinstance(key, str) and len(key) <= MAX_PATTERN_CHARS, f"{where}.dynamic keys must be patterns")
        if key.startswith("-:"):
            excluded.append("re:" + key[2:])
        else:
            own = value.get("bits") if isinstance(value, dict) else None
            if isinstance(own, int) and not isinstance(own, bool) and own != bits:
                overrides.append((_Patterns(["re:" + key.removeprefix("+:")], f"{where}.dynamic", substring=False),
                                  f"int{own}"))
    skipped = _Patterns(excluded, f"{where}.dynamic", substring=False)

    def fmt(name: str) -> str:
        if name in kept or name in skipped:
            return plain
        return next((f for patterns, f in overrides if name in patterns), quantized)
    fields = (f"quant_method {method}, bits {bits}" + (f", group_size {quant.get('group_size')}"
                                                        if isinstance(quant.get("group_size"), int) else "")
              + (f", modules_to_not_convert ({len(kept)})" if len(kept) else "")
              + (f", dynamic ({len(dynamic)})" if dynamic else ""))
    return _build(f"{where}: {fields}", fmt, modules)


def _ct_format(weights, plain: str, activations=None) -> str:
    """A compressed-tensors group's weight format: float 8 fp8, float 4 fp4 (NVFP4, MXFP4), int 4 with
    unquantized activations int4 (W4A16: Kimi K2-Thinking's and K2.5's routed experts), int N with quantized
    activations wNaM (W4A8, W8A8: not planned), any other int N intN."""
    if weights is None:
        return plain
    _expect(isinstance(weights, dict), "a compressed-tensors config group's weights must be an object")
    kind, bits = weights.get("type"), weights.get("num_bits")
    if kind == "float" and bits in (4, 8):
        return f"fp{bits}"
    if kind == "float" and bits == 16:
        return plain
    if kind == "int" and activations is not None:
        act_bits = activations.get("num_bits") if isinstance(activations, dict) else None
        return f"w{str(bits)[:4]}a{str(act_bits)[:4]}"
    return f"{str(kind)[:10]}{str(bits)[:4]}"


def _build(source: str, fmt, modules: dict, kv: str | None = None, producer: str = "modelopt",
           kv_problem: str = "") -> CheckpointFormats:
    """Each of configure's modules in the format that holds most of its weights; fmt(module name) -> format."""
    assert producer in PRODUCERS
    chosen, mixed = {}, []
    for module in MODULES:
        if not modules[module]:
            continue
        weight = defaultdict(float)
        for name, params in modules[module]:
            weight[fmt(name)] += params
        chosen[module] = max(weight, key=lambda f: (weight[f], BYTES.get(f, 0)))
        if len(weight) > 1:
            total = sum(weight.values())
            mixed.append(f"{module} {', '.join(f'{f} {w / total:.0%}' for f, w in weight.items())}")
    mtp = chosen.pop("mtp", None)
    main = {m: chosen.get(m) for m in ("attention", "experts", "dense")}  # dense None: no dense MLP or shared expert
    if mtp and _mtp_matches(modules, fmt, main):
        mtp = None
    odd = sorted({f for f in [*main.values(), mtp] if f and f not in BYTES})
    problem = f"weights in {', '.join(odd)}, not a format configure plans in ({', '.join(BYTES)})" if odd else ""
    return CheckpointFormats(source, *(None if problem else main[m] for m in ("attention", "experts", "dense")),
                             mtp=None if problem else mtp, kv=kv, kv_producer=producer, problem=problem,
                             kv_problem=kv_problem, mixed=tuple(mixed))


def _mtp_matches(modules: dict, fmt, main: dict) -> bool:
    """Whether every MTP projection is in the format of the main-model module it mirrors."""
    return all(fmt(name) == main[module] for name, module in modules["mtp_roles"])


class _Patterns:
    """Module-name patterns of an exclude, ignore or targets list: "re:REGEX" (re.match, as compressed-tensors
    reads them, on the `regex` engine with REGEX_TIMEOUT_S a match), globs (fnmatch, as ModelOpt writes them)
    and plain names, which match the module and its children and, with substring=True, any name holding them
    between dots (vLLM reads ModelOpt's lists and transformers fp8's modules_to_not_convert as substrings;
    between dots, "mlp.gate" does not take "mlp.gate_proj" nor "layers.1" "layers.10")."""

    def __init__(self, patterns: list[str], field: str, substring: bool):
        self.literal = {p for p in patterns if not p.startswith("re:") and not set(p) & set("*?[")}
        wild = [p for p in patterns if p not in self.literal]
        _expect(len(wild) <= MAX_WILDCARDS, f"{field} has {len(wild)} wildcard patterns, more than {MAX_WILDCARDS}")
        globs = [fnmatch.translate(p) for p in wild if not p.startswith("re:")]
        self.glob = re.compile("|".join(globs)) if globs else None
        self.regexes = []
        for p in wild:
            if p.startswith("re:"):
                try:
                    re.compile(p[3:])  # the syntax compressed-tensors and vLLM accept
                    self.regexes.append(regex.compile(p[3:], regex.VERSION0))
                except (re.error, regex.error) as e:
                    raise ValueError(f"{field}: the pattern {p!r} is not a regular expression: {e}") from None
        self.field, self.substring, self.count = field, substring, len(patterns)

    def __len__(self) -> int:
        return self.count

    def __contains__(self, name: str) -> bool:
        parts = name.split(".")
        starts = range(len(parts)) if self.substring else (0,)
        held = {".".join(parts[i:j]) for i in starts for j in range(i + 1, len(parts) + 1)}
        return bool(self.literal & held) or bool(self.glob and self.glob.match(name)) or any(
            self._match(r, name) for r in self.regexes)

    def _match(self, pattern: regex.Pattern, name: str) -> bool:
        try:
            return pattern.match(name, timeout=REGEX_TIMEOUT_S) is not None
        except TimeoutError:
            raise ValueError(f"{self.field}: the pattern 're:{pattern.pattern}' took more than {REGEX_TIMEOUT_S:g} s "
                             f"to match the module name {name!r} (a nested quantifier backtracking?)") from None


def _prefixes(name: str) -> list[str]:
    """name and the modules holding it: a.b.c, a.b, a."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def _strings(section: dict, key: str, where: str) -> list[str]:
    value = section.get(key) or []
    _expect(isinstance(value, list) and len(value) <= MAX_PATTERNS
            and all(isinstance(v, str) and len(v) <= MAX_PATTERN_CHARS for v in value),
            f"{where}.{key} must be a list of at most {MAX_PATTERNS} module names of at most {MAX_PATTERN_CHARS} characters")
    return value


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)
