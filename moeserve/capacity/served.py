"""The formats `moeserve serve` runs a checkpoint in, module by module, and the settings that make it so:
what `moeserve configure --emit` plans in (emit.py writes the settings; docs/capacity.md, `--emit`).

GPU profiles (`device: cuda`, `kernels: triton`, written out so the file does not hang on `auto`; the
triton set runs FP8 block-scaled weights, kernels/triton_set.py `fp8_block_weights`):
    weights   a block-FP8 checkpoint's FP8 modules stay FP8 (loading keeps them for such a set); every
              other module runs in `dtype` (bf16, fp16 when asked). fp8 asked for modules the checkpoint
              holds in bf16/fp16 is `quantization: fp8` (models/online_fp8.py), which quantizes every
              linear layer and routed expert: all modules fp8 or none moved. MLA's kv_b_proj stays in
              `dtype` either way (dense/mla.py: its halves are absorbed into attention), and so do the
              embeddings, LM head and routers (as configure plans them anyway).
    KV        `dtype`, or fp8 (`kv_cache_dtype: fp8`); attention computes in `dtype` either way (its
              kernels upcast an FP8 cache). Tokens travel to the experts and back in `dtype`.
CPU profiles (`device: cpu`, `kernels: cpu`, which runs no FP8 weights): every module in `dtype` (fp32,
or bf16 / fp16 when asked), an FP8 checkpoint dequantized at load; KV in `dtype` or fp8.
Either: gpt-oss's MXFP4 experts are dequantized into `dtype` at load (models/mxfp4.py); FP4 weights are
run natively nowhere, and checkpoints moeserve does not load (ModelOpt, compressed-tensors, FP8 without
block scales, ...) are refused with one line, as `moeserve serve` refuses them
(models/quantization.py: this module mirrors its rules, which capacity/ may not import; a test keeps
the two in step).
"""
from __future__ import annotations

from dataclasses import dataclass

from moeserve.capacity.checkpoint_formats import CheckpointFormats, checkpoint_formats, modelopt_sidecar
from moeserve.capacity.dtypes import TORCH_NAMES
from moeserve.capacity.layout import Precision
from moeserve.capacity.model_spec import ModelSpec, config_path, read_json_object

PLAIN = tuple(TORCH_NAMES)  # the formats one `dtype` can name
# models/quantization.py's rules: the methods `moeserve serve` loads, and the architectures that read mxfp4
E4M3_NAMES = ("e4m3", "float8_e4m3fn", "float8_e4m3")
MXFP4_ARCHITECTURES = ("GptOssForCausalLM",)
# the flags' modules (argparse dest -> the name said), in Precision's order
MODULES = (("attn_weights", "attention"), ("moe_weights", "experts"), ("dense_weights", "dense"),
           ("mtp_weights", "MTP"))
RUN = "(drop --emit to plan it)"


@dataclass(frozen=True)
class Served:
    """What `--emit` plans in: `prec`, the serve settings that run it (device, kernels, dtype, quantization,
    kv_cache_dtype) and header lines saying how the weights and the KV cache get there."""
    prec: Precision
    settings: dict
    lines: tuple[str, ...]

    @property
    def dtype(self) -> str:
        return self.settings["dtype"]

    def summary(self) -> str:
        """The formats in a few words (`wrote PATH: ...`)."""
        p = self.prec
        if len({p.attn_weights, p.moe_weights, p.dense_weights}) == 1:
            return f"weights {p.moe_weights}, KV {p.kv}"
        return f"attention {p.attn_weights}, experts {p.moe_weights}, dense {p.dense_weights}, KV {p.kv}"


def release_config(source: str | None) -> tuple[dict | None, bool]:
    """(config.json of --model as `moeserve serve` reads it, whether a ModelOpt hf_quant_config.json sits
    beside a config.json without quantization_config); a shipped name's is the release's
    (`_release_quantization_config` in capacity/models/); None for the built-in model."""
    if source is None:
        return None, False
    path, shipped = config_path(source)
    cfg = read_json_object(path, source)
    if shipped:
        quant = cfg.get("_release_quantization_config")
        return (dict(cfg, quantization_config=quant) if quant else cfg), False
    return cfg, modelopt_sidecar(path, cfg) is not None


def unloadable(cfg: dict | None, modelopt_sidecar: bool) -> str:
    """Why `moeserve serve` does not load this checkpoint ("" when it does), as models/quantization.py says."""
    if modelopt_sidecar:
        return "it loads no ModelOpt checkpoints (hf_quant_config.json)"
    quant = (cfg or {}).get("quantization_config")
    if not quant:
        return ""
    if not isinstance(quant, dict):
        return "its quantization_config is not an object"
    method = quant.get("quant_method")
    if method == "fp8":
        block = quant.get("weight_block_size")
        if not (isinstance(block, (list, tuple)) and len(block) == 2
                and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            return "it loads block-scaled FP8 only (weight_block_size), not this fp8 quantization_config"
        if quant.get("fmt", "e4m3") not in E4M3_NAMES:
            return f"it loads e4m3 FP8 only, not fmt {str(quant.get('fmt'))[:20]}"
        if quant.get("activation_scheme", "dynamic") != "dynamic":
            return "it loads FP8 with dynamic activation scales only"
        return ""
    if method == "mxfp4":
        archs = cfg.get("architectures")
        arch = archs[0] if isinstance(archs, list) and archs else None  # config.json's list; anything else names none
        return "" if arch in MXFP4_ARCHITECTURES else f"it loads mxfp4 for {', '.join(MXFP4_ARCHITECTURES)} only"
    return f"it loads no quant_method {str(method)[:40]!r} (block-scaled fp8, gpt-oss's mxfp4 and unquantized ones)"


def served_formats(args, gpu: bool, model: ModelSpec, ckpt: CheckpointFormats | None) -> Served:
    """The formats `moeserve serve` runs --model in on this hardware (`gpu`: a GPU profile) with the format
    flags of `args`, and the settings that make it; ValueError (one line) for what it does not run."""
    cfg, sidecar = release_config(args.model)
    why = unloadable(cfg, sidecar)
    if why:
        raise ValueError(f"--emit writes a config moeserve serve runs, and {why}: --model {args.model} {RUN}")
    quant = (cfg or {}).get("quantization_config") or {}
    method = quant.get("quant_method")
    if ckpt is None and cfg is not None and method:
        ckpt = checkpoint_formats(cfg, None, model)  # a shipped name: the release's formats
    flags = {dest: getattr(args, dest) for dest, _ in MODULES}
    given = {k: v for k, v in (("weights", args.weights), *flags.items(), ("kv_dtype", args.kv_dtype)) if v}
    act = _dtype(given, gpu)
    for dest, say in (("dispatch_dtype", "dispatch"), ("combine_dtype", "combine")):
        value = getattr(args, dest, None)
        if value and value != act:
            raise ValueError(f"--emit writes a config moeserve serve runs, and it sends tokens to the experts and "
                             f"back in dtype ({act}): --{dest.replace('_', '-')} {value} {RUN}")
    # what serve runs each module in by itself: FP8 kept on GPUs (triton), everything else in dtype
    kept = gpu and method == "fp8" and ckpt is not None

    def own(fmt: str | None) -> str:
        return "fp8" if kept and fmt == "fp8" else act
    base = {"attn_weights": own(ckpt.attention if ckpt else None), "moe_weights": own(ckpt.experts if ckpt else None),
            "dense_weights": own((ckpt.dense or ckpt.experts) if ckpt else None)}
    base["mtp_weights"] = own(ckpt.mtp) if ckpt and ckpt.mtp else base["moe_weights"]
    wanted = {dest: flags[dest] or args.weights or base[dest] for dest, _ in MODULES}
    # the modules the model has (a dense MLP or shared expert, an MTP layer): only they can differ
    has = [(dest, say) for dest, say in MODULES if dest == "attn_weights" or dest == "moe_weights"
           or (dest == "dense_weights" and (model.num_dense_layers or model.shared_params))
           or (dest == "mtp_weights" and model.mtp_layers)]
    for dest in {d for d, _ in MODULES} - {d for d, _ in has}:
        base[dest] = wanted[dest] = wanted["moe_weights"]
    _refuse_formats(wanted, args.kv_dtype, act, gpu, has)
    online = wanted != base
    if online:
        moved = [f"{say} {base[dest]} -> {wanted[dest]}" for dest, say in has if wanted[dest] != base[dest]]
        if set(wanted.values()) != {"fp8"}:
            raise ValueError(_mismatch(wanted, base, act, has))
    kv = args.kv_dtype or act
    attn = wanted["attn_weights"]
    prec = Precision(weights=wanted["moe_weights"], kv=kv, activations=act, attn=attn, moe=wanted["moe_weights"],
                     dense=wanted["dense_weights"],
                     mtp=wanted["mtp_weights"] if wanted["mtp_weights"] != wanted["moe_weights"] else None,
                     dispatch=act, combine=act, kv_b=act if model.is_mla and attn != act else None,
                     attention_compute=act)
    name = TORCH_NAMES[act]
    settings = {"device": "cuda" if gpu else "cpu", "kernels": "triton" if gpu else "cpu", "dtype": name,
                "quantization": "fp8" if online else "none", "kv_cache_dtype": "fp8" if kv == "fp8" else "auto"}
    lines = [_weights_line(method, kept, base, name, model)]
    if online:
        kept_plain = "the LM head, routers and MLA's kv_b_proj" if model.is_mla else "the LM head and routers"
        lines.append(f"quantization: fp8 quantizes at load ({', '.join(moved)}); {kept_plain} stay {name}")
    if kv == "fp8":
        lines.append(f"kv_cache_dtype: fp8 stores K/V as e4m3 (half the bytes of {act}); attention upcasts them to {name}")
    return Served(prec, settings, tuple(line for line in lines if line))


def _dtype(given: dict, gpu: bool) -> str:
    """The one `dtype` weights, activations and KV share: the plain format the flags name, else bf16 on
    GPUs (serve's auto on cuda), fp32 on CPUs."""
    plain = sorted({v for v in given.values() if v in PLAIN})
    if len(plain) > 1:
        named = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in given.items() if v in PLAIN)
        raise ValueError(f"--emit writes a config moeserve serve runs, in one dtype for every unquantized weight, the "
                         f"activations and the KV cache: {named} mix {' and '.join(plain)} {RUN}")
    if plain and gpu and plain[0] == "fp32":
        raise ValueError(f"--emit writes a config moeserve serve runs, and on GPUs it runs bf16/fp16 and fp8, not fp32 {RUN}")
    return plain[0] if plain else ("bf16" if gpu else "fp32")


def _refuse_formats(wanted: dict, kv: str | None, act: str, gpu: bool, modules: list) -> None:
    for dest, say in (*modules, ("kv_dtype", "KV")):
        fmt = kv if dest == "kv_dtype" else wanted[dest]
        if fmt in ("fp4", "mxfp4"):
            raise ValueError(f"--emit writes a config moeserve serve runs, and it runs no FP4 {'KV cache' if say == 'KV' else 'weights'} "
                             f"(gpt-oss's MXFP4 experts are dequantized at load, NVFP4 checkpoints do not load): {say} "
                             f"{fmt} {RUN}")
        if fmt == "int4":
            raise ValueError(f"--emit writes a config moeserve serve runs, and it runs no INT4 weights (W4A16 "
                             f"checkpoints do not load): {say} int4 {RUN}")
        if fmt == "fp8" and not gpu and dest != "kv_dtype":
            raise ValueError(f"--emit writes a config moeserve serve runs, and on CPUs its kernels run no FP8 weights "
                             f"(FP8 checkpoints are dequantized to {act} at load): {say} fp8 {RUN}")


def _mismatch(wanted: dict, base: dict, act: str, modules: list) -> str:
    head = "--emit writes a config moeserve serve runs, and "
    back = [say for dest, say in modules if base[dest] == "fp8" and wanted[dest] != "fp8"]
    if back:
        return (head + f"on GPUs its triton kernels keep this checkpoint's FP8 weights in FP8: {', '.join(back)} "
                f"{act} is not what it runs {RUN}")
    parts = ", ".join(f"{say} {wanted[dest]}" for dest, say in modules)
    return (head + f"it moves {act} weights to FP8 only with quantization: fp8, which quantizes every linear layer "
            f"and expert: {parts} mixes them (pass --weights fp8) {RUN}")


def _weights_line(method: str | None, kept: bool, base: dict, name: str, model: ModelSpec) -> str:
    """How the checkpoint's weights become the planned formats, one header line."""
    mla = (" (MLA's kv_b_proj dequantized to " + name + ": its halves are absorbed into attention)"
           if model.is_mla and base["attn_weights"] == "fp8" else "")  # an attention kept in `dtype` has nothing to dequantize
    if kept and "fp8" in base.values():
        some = "" if set(base.values()) == {"fp8"} else f" (its other modules in {name})"
        return f"weights: the checkpoint's block-FP8 layers kept FP8 by the triton kernels{some}{mla}"
    if method == "fp8":
        return f"weights: the checkpoint's block-FP8 layers dequantized to {name} at load (the cpu kernels run no FP8)"
    if method == "mxfp4":
        return f"weights: gpt-oss's MXFP4 experts dequantized to {name} at load (moeserve has no FP4 kernels)"
    return ""
