"""`moeserve configure --model DIR` plans in the formats the checkpoint runs in: config.json's
quantization_config or a ModelOpt hf_quant_config.json, each engine's KV default, flags over both."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeserve.capacity.checkpoint_formats import _Patterns, checkpoint_formats, read_checkpoint
from moeserve.capacity import model_spec
from moeserve.capacity.cli import main
from moeserve.capacity.engine_kv import default_kv_by_engine
from moeserve.capacity.model_spec import from_hf_config, load_model

SHIPPED = Path(__file__).resolve().parents[2] / "moeserve" / "capacity" / "models"
BLOCK_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
# nvidia/DeepSeek-R1-FP4's shape: NVFP4 MoE and dense layers, attention and the MTP layer (61) left in BF16, FP8 KV
MODELOPT_NVFP4 = {"producer": {"name": "modelopt", "version": "0.29.0"},
                  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                                   "exclude_modules": ["lm_head", "model.layers.*.self_attn*", "model.layers.61*",
                                                       "model.layers.*.mlp.gate"]}}
# RedHatAI's NVFP4 releases: one Linear group, the routers and (here) attention ignored, an FP8 KV scheme
CT_NVFP4 = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float",
                                                                            "group_size": 16, "strategy": "tensor_group"},
                                          "input_activations": {"num_bits": 4, "type": "float", "group_size": 16}}},
            "ignore": ["lm_head", "re:.*mlp.gate$", "re:.*self_attn.*"],
            "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}}
# Moonshot's Kimi K2-Thinking / K2.5 shape: W4A16 (int 4 weights in groups of 32, activations unquantized) on the
# routed experts, attention, shared experts, the dense layer and the LM head left in BF16
CT_INT4 = {"quant_method": "compressed-tensors", "format": "pack-quantized",
           "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|down)_proj$"],
           "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "output_activations": None,
                                         "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                     "strategy": "group", "group_size": 32}}}}
# integer weights with quantized activations (W4A8): not a format configure plans in
CT_W4A8 = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
           "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "group_size": 128},
                                         "input_activations": {"num_bits": 8, "type": "int", "strategy": "token"}}}}


def shipped(name: str) -> dict:
    return json.loads((SHIPPED / f"{name}.json").read_text())


def checkpoint(tmp_path: Path, config: dict, hf_quant: dict | None = None, name: str = "ckpt") -> str:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    if hf_quant is not None:
        (directory / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    return str(directory)


def formats(config: dict, hf_quant: dict | None = None):
    return checkpoint_formats(config, hf_quant, from_hf_config(config))


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


DECODE = ("--hardware", "b200", "--phase", "decode", "--ep", "8", "--batch", "16")


# --- each scheme read on its own (pure) ----------------------------------------------------------------------
def test_deepseek_block_fp8_is_fp8_everywhere_and_keeps_a_bf16_kv():
    f = formats(dict(shipped("deepseek-r1"), quantization_config=BLOCK_FP8))
    assert (f.attention, f.experts, f.dense, f.mtp, f.kv, f.problem) == ("fp8", "fp8", "fp8", None, None, "")
    assert "quant_method fp8, weight_block_size [128, 128]" in f.source
    assert default_kv_by_engine(f.kv, f.kv_producer, True, "bf16") == {"sglang": "bf16", "vllm": "bf16", "trtllm": "bf16"}


def test_block_fp8_modules_to_not_convert_stay_in_the_checkpoint_dtype():
    quant = dict(BLOCK_FP8, modules_to_not_convert=["self_attn"])
    f = formats(dict(shipped("qwen3-235b-a22b"), quantization_config=quant))
    assert (f.attention, f.experts) == ("bf16", "fp8")


def test_modelopt_nvfp4_with_fp8_kv_and_excluded_attention():
    f = formats(shipped("deepseek-r1"), MODELOPT_NVFP4)
    assert (f.attention, f.experts, f.dense, f.mtp, f.kv, f.kv_producer) == ("bf16", "fp4", "fp4", "bf16", "fp8", "modelopt")
    assert f.source.startswith("hf_quant_config.json quantization: quant_algo NVFP4, exclude_modules (4)")
    # every engine reads ModelOpt's FP8 KV declaration with its KV setting at auto
    assert set(default_kv_by_engine(f.kv, f.kv_producer, True, "bf16").values()) == {"fp8"}


def test_config_json_quantization_config_is_read_before_hf_quant_config():
    f = formats(dict(shipped("deepseek-r1"), quantization_config=BLOCK_FP8), MODELOPT_NVFP4)
    assert f.experts == "fp8" and f.source.startswith("config.json")


def test_modelopt_mixed_precision_takes_each_modules_own_algorithm():
    """DeepSeek-R1-0528-FP4-v2's shape: attention FP8, experts and dense MLPs NVFP4 (per module)."""
    cfg = shipped("deepseek-r1")
    layers = {}
    for i in range(cfg["num_hidden_layers"]):
        for proj in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
            layers[f"model.layers.{i}.self_attn.{proj}"] = {"quant_algo": "FP8"}
        mlp = "mlp" if i < cfg["first_k_dense_replace"] else "mlp.experts"
        layers[f"model.layers.{i}.{mlp}"] = {"quant_algo": "NVFP4", "group_size": 16}
        layers[f"model.layers.{i}.mlp.shared_experts"] = {"quant_algo": "NVFP4", "group_size": 16}
    f = formats(dict(cfg, quantization_config={"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
                                               "quantized_layers": layers, "kv_cache_scheme": {"type": "float", "num_bits": 8,
                                                                                             "dynamic": False}}))
    # the MTP layer (61) is not listed: unquantized
    assert (f.attention, f.experts, f.dense, f.mtp, f.kv) == ("fp8", "fp4", "fp4", "bf16", "fp8")


def test_compressed_tensors_nvfp4_with_an_ignore_list():
    f = formats(dict(shipped("qwen3-235b-a22b"), quantization_config=CT_NVFP4))
    assert (f.attention, f.experts, f.dense, f.kv, f.kv_producer) == ("bf16", "fp4", None, "fp8", "compressed-tensors")
    # vLLM forces FP8 for a kv_cache_scheme in its GQA Attention layer, TensorRT-LLM maps it to FP8, SGLang does not
    assert default_kv_by_engine(f.kv, f.kv_producer, False, "bf16") == {"sglang": "bf16", "vllm": "fp8", "trtllm": "fp8"}
    assert default_kv_by_engine(f.kv, f.kv_producer, True, "bf16")["vllm"] == "bf16"  # MLAAttention has no such override


def test_compressed_tensors_groups_match_by_target():
    quant = {"quant_method": "compressed-tensors", "format": "float-quantized",
             "config_groups": {"experts": {"targets": ["re:.*block_sparse_moe.experts.*"],
                                           "weights": {"num_bits": 4, "type": "float"}},
                               "rest": {"targets": ["re:.*self_attn.*"], "weights": {"num_bits": 8, "type": "float"}}}}
    f = formats(dict(shipped("mixtral-8x7b"), quantization_config=quant))
    assert (f.attention, f.experts, f.kv) == ("fp8", "fp4", None)


def test_compressed_tensors_a_target_naming_the_module_wins_over_linear_in_any_group_order():
    """compressed-tensors (match_targets) and vLLM (find_matched_target) match a module's name or re: pattern
    before its class name: a "Linear" group listed first does not take the experts a regex group names."""
    linear = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}
    experts = {"targets": ["re:.*mlp.experts.*"], "weights": {"num_bits": 4, "type": "float"}}
    for groups in ({"all": linear, "experts": experts}, {"experts": experts, "all": linear}):
        quant = {"quant_method": "compressed-tensors", "config_groups": groups}
        f = formats(dict(shipped("qwen3-235b-a22b"), quantization_config=quant))
        assert (f.attention, f.experts) == ("fp8", "fp4"), groups


def test_modelopt_nvfp4_kv_runs_only_on_tensorrt_llm_by_default():
    quant = {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"],
             "kv_cache_scheme": {"type": "float", "num_bits": 4, "dynamic": False}}
    f = formats(dict(shipped("qwen3-235b-a22b"), quantization_config=quant))
    assert (f.attention, f.experts, f.kv) == ("fp4", "fp4", "fp4")
    assert default_kv_by_engine(f.kv, f.kv_producer, False, "bf16") == {"sglang": "bf16", "vllm": "bf16", "trtllm": "fp4"}


def test_bf16_original_runs_bf16_and_a_module_split_between_formats_is_named():
    f = formats(shipped("deepseek-v3"))
    assert (f.attention, f.experts, f.dense, f.kv) == ("bf16", "bf16", "bf16", None)
    assert "no quantization_config, torch_dtype bfloat16" in f.source
    empty = formats(dict(shipped("deepseek-v3"), quantization_config={}))  # an empty description is none, as serve reads it
    assert (empty.attention, empty.experts, empty.kv, empty.problem) == ("bf16", "bf16", None, "")
    split = formats(shipped("deepseek-v3"), {"quantization": {"quant_algo": "FP8", "exclude_modules": ["*kv_a_proj_with_mqa"]}})
    assert split.attention == "fp8" and split.mixed and split.mixed[0].startswith("attention fp8 ")


@pytest.mark.parametrize("quant, needle", [
    (CT_W4A8, "weights in w4a8"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": {
        "num_bits": 8, "type": "int"}}}}, "weights in int8"),
    ({"quant_method": "gptq", "bits": 4}, "quant_method 'gptq'"),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "weights in w4a8_awq"),
])
def test_a_scheme_configure_does_not_plan_is_a_problem_not_a_guess(quant, needle):
    f = formats(dict(shipped("qwen3-235b-a22b"), quantization_config=quant))
    assert needle in f.problem and f.experts is None


@pytest.mark.parametrize("scheme", [{"type": ["float"], "num_bits": 8}, {"type": "float", "num_bits": {"8": 8}}])
def test_a_modelopt_kv_cache_scheme_of_odd_json_types_is_a_kv_problem_not_a_type_error(scheme):
    quant = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": scheme}
    f = formats(dict(shipped("qwen3-235b-a22b"), quantization_config=quant))
    assert f.experts == "fp8" and f.kv is None and "is not a KV format configure plans in" in f.kv_problem


@pytest.mark.parametrize("quant, needle", [
    ("fp8", "quantization_config must be an object"),
    ({"quant_method": "fp8", "modules_to_not_convert": "lm_head"}, "modules_to_not_convert must be a list"),
    ({"quant_method": "compressed-tensors", "ignore": ["re:("]}, "not a regular expression"),
    ({"quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["*x"] * 5000}, "more than 4096"),
])
def test_a_description_configure_cannot_read_is_named(quant, needle):
    with pytest.raises(ValueError, match=needle):
        formats(dict(shipped("qwen3-235b-a22b"), quantization_config=quant))


@pytest.mark.parametrize("text, needle", [("[1, 2]", "must hold a JSON object"), ("{", "is not valid JSON"),
                                           ('{"quantization": "NVFP4"}', "quantization must be an object")])
def test_an_hf_quant_config_configure_cannot_read_exits_2_with_one_line(tmp_path, capsys, text, needle):
    ckpt = checkpoint(tmp_path, shipped("qwen3-235b-a22b"))
    (Path(ckpt) / "hf_quant_config.json").write_text(text)
    assert main(["--model", ckpt, *DECODE]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "hf_quant_config.json" in err


def test_a_config_that_cannot_be_read_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    """A config.json that is a directory, or an hf_quant_config.json without read permission: one line, no
    traceback (OSError is not ValueError)."""
    directory = tmp_path / "dir"
    (directory / "config.json").mkdir(parents=True)
    assert main(["--model", str(directory), *DECODE]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot read" in err and "config.json" in err
    ckpt = checkpoint(tmp_path, shipped("qwen3-235b-a22b"), MODELOPT_NVFP4)
    real_open = open

    def denied(path, *args, **kwargs):
        if str(path).endswith("hf_quant_config.json"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(model_spec, "open", denied, raising=False)
    for extra in ((), ("--emit", str(tmp_path / "serve.yaml"))):
        assert main(["--model", ckpt, *DECODE, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "cannot read" in err and "Permission denied" in err


def test_shipped_names_and_the_builtin_model_have_no_checkpoint():
    assert read_checkpoint("deepseek-v3", load_model("deepseek-v3")) is None
    assert read_checkpoint(None, load_model(None)) is None


# --- the CLI end to end ----------------------------------------------------------------------------------------
def test_the_formats_line_names_the_checkpoint_file_and_fields(tmp_path, capsys):
    ckpt = checkpoint(tmp_path, shipped("deepseek-r1"), MODELOPT_NVFP4)
    assert main(["--model", ckpt, *DECODE]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("formats: attention bf16, experts fp4, dense fp4, KV fp8")
    assert lines[2] == ("checkpoint formats: attention bf16, experts fp4, dense fp4, MTP bf16, KV fp8 (hf_quant_config.json "
                        "quantization: quant_algo NVFP4, exclude_modules (4), kv_cache_quant_algo FP8)")


def test_json_carries_the_checkpoint_and_a_flag_overrides_it(tmp_path, capsys):
    ckpt = checkpoint(tmp_path, shipped("deepseek-r1"), MODELOPT_NVFP4)
    out = run_json(capsys, "--model", ckpt, *DECODE)
    assert out["precision"] == {"attention_weights": "bf16", "moe_weights": "fp4", "dense_weights": "fp4", "kv": "fp8",
                                     "dispatch": "fp4", "combine": "bf16", "activations": "bf16", "mtp_weights": "bf16"}
    assert out["checkpoint"]["from_checkpoint"] == ["attention_weights", "moe_weights", "dense_weights", "mtp_weights", "kv"]
    assert out["checkpoint"]["note"] in out["notes"]
    flagged = run_json(capsys, "--model", ckpt, *DECODE, "--moe-weights", "fp8", "--kv-dtype", "bf16")
    assert flagged["precision"]["moe_weights"] == "fp8" and flagged["precision"]["kv"] == "bf16"
    assert flagged["precision"]["attention_weights"] == "bf16"  # still the checkpoint's
    assert flagged["checkpoint"]["flags"] == ["--moe-weights fp8", "--kv-dtype bf16"]
    assert "moe_weights" not in flagged["checkpoint"]["from_checkpoint"]
    everything = run_json(capsys, "--model", ckpt, *DECODE, "--weights", "fp8")
    assert {everything["precision"][k] for k in ("attention_weights", "moe_weights", "dense_weights", "mtp_weights")} == {"fp8"}
    assert everything["checkpoint"]["from_checkpoint"] == ["kv"]


def test_engine_sets_the_kv_cache_the_plan_assumes(tmp_path, capsys):
    ckpt = checkpoint(tmp_path, dict(shipped("qwen3-235b-a22b"), quantization_config=CT_NVFP4))
    plain = run_json(capsys, "--model", ckpt, *DECODE)
    assert plain["precision"]["kv"] == "fp8" and plain["checkpoint"]["kv_engine"] is None
    assert any(n.startswith("KV cache planned fp8, as the checkpoint declares: with the KV dtype left at auto, vLLM and "
                            "TensorRT-LLM run fp8, SGLang runs bf16") for n in plain["notes"])
    sglang = run_json(capsys, "--model", ckpt, *DECODE, "--engine", "sglang")
    vllm = run_json(capsys, "--model", ckpt, *DECODE, "--engine", "vllm")
    assert (sglang["precision"]["kv"], vllm["precision"]["kv"]) == ("bf16", "fp8")
    assert sglang["memory"]["kv_bytes_per_token"] == pytest.approx(2 / (1 + 4 / 16384) * vllm["memory"]["kv_bytes_per_token"])
    assert any(n.startswith("KV cache planned bf16, SGLang's default for this checkpoint") for n in sglang["notes"])
    assert run_json(capsys, "--model", ckpt, *DECODE, "--engine", "sglang", "--kv-dtype", "fp8")["precision"]["kv"] == "fp8"


def test_atom_runs_bf16_kv_whatever_the_checkpoint_declares_and_only_on_amd_cards(tmp_path, capsys):
    """ATOM's --kv_cache_dtype defaults to bf16 (no auto): an AMD card's KV note names it beside the others; an
    NVIDIA card's does not, and --engine atom there exits 2 naming the cards it runs on."""
    from moeserve.capacity.engine_kv import default_kv, engines_for
    assert default_kv("atom", "fp8", "modelopt", True, "bf16") == "bf16" and default_kv("atom", None, "", False, "bf16") == "bf16"
    assert "atom" in engines_for("cdna4") and "atom" in engines_for("cdna3")
    assert all("atom" not in engines_for(c) for c in ("hopper", "hopper_h20", "blackwell"))
    ckpt = checkpoint(tmp_path, dict(shipped("qwen3-235b-a22b"), quantization_config=CT_NVFP4))
    amd = ("--hardware", "mi355x", "--phase", "decode", "--ep", "8", "--batch", "16")
    plain = run_json(capsys, "--model", ckpt, *amd)
    assert plain["checkpoint"]["kv_by_engine"] == {"sglang": "bf16", "vllm": "fp8", "trtllm": "fp8", "atom": "bf16"}
    assert any(n.startswith("KV cache planned fp8, as the checkpoint declares: with the KV dtype left at its default "
                            "(auto; ATOM's bf16), SGLang and ATOM run bf16, vLLM and TensorRT-LLM run fp8") and
               "ATOM's --kv_cache_dtype set it" in n for n in plain["notes"])
    atom = run_json(capsys, "--model", ckpt, *amd, "--engine", "atom")
    assert atom["precision"]["kv"] == "bf16" and atom["checkpoint"]["kv_engine"] == "atom"
    assert "atom" not in run_json(capsys, "--model", ckpt, *DECODE)["checkpoint"]["kv_by_engine"]
    assert main(["--model", ckpt, *DECODE, "--engine", "atom"]) == 2
    assert capsys.readouterr().err.strip() == ("moeserve configure: error: --engine atom: ATOM runs on AMD Instinct "
                                               "GPUs (ROCm) only, and b200 is not one (--hardware mi300x or mi355x)")


def test_an_unsupported_scheme_exits_2_naming_it_and_the_flags_unless_they_are_given(tmp_path, capsys):
    ckpt = checkpoint(tmp_path, dict(shipped("qwen3-235b-a22b"), quantization_config=CT_W4A8))
    assert main(["--model", ckpt, *DECODE]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "weights in w4a8" in err and "pass --weights" in err
    out = run_json(capsys, "--model", ckpt, *DECODE, "--weights", "int4")
    assert out["precision"]["moe_weights"] == "int4" and "weights in w4a8" in out["checkpoint"]["problem"]


def test_kimi_int4_plans_its_routed_experts_in_w4a16_and_the_rest_as_ignore_leaves_it():
    f = formats(dict(shipped("kimi-k2"), quantization_config=CT_INT4, torch_dtype="bfloat16"))
    assert (f.attention, f.experts, f.dense, f.kv, f.problem) == ("bf16", "int4", "bf16", None, "")
    assert "config_groups (1: int4)" in f.source


def test_a_kimi_int4_checkpoint_plans_and_tokens_travel_in_bf16(tmp_path, capsys):
    ckpt = checkpoint(tmp_path, dict(shipped("kimi-k2"), quantization_config=CT_INT4, torch_dtype="bfloat16"))
    out = run_json(capsys, "--model", ckpt, *DECODE)
    prec = out["precision"]
    assert (prec["attention_weights"], prec["moe_weights"], prec["dense_weights"]) == ("bf16", "int4", "bf16")
    assert prec["dispatch"] == "bf16"  # W4A16: no activation quantisation ahead of the experts


def test_shipped_names_keep_the_blanket_defaults(capsys):
    out = run_json(capsys, "--model", "deepseek-r1", *DECODE)
    assert out["checkpoint"] is None and out["precision"]["moe_weights"] == "fp8" and out["precision"]["kv"] == "bf16"


def test_emit_refuses_a_checkpoint_moeserve_serve_does_not_load_and_names_its_formats(tmp_path, capsys):
    """moeserve serve loads no ModelOpt checkpoint: --emit exits 2 with one line, writing nothing."""
    ckpt = checkpoint(tmp_path, shipped("deepseek-r1"), MODELOPT_NVFP4)
    target = tmp_path / "serve.yaml"
    assert main(["--model", ckpt, *DECODE, "--emit", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and not target.exists()
    assert "loads no ModelOpt checkpoints" in err[0] and "the checkpoint runs in attention bf16, experts fp4" in err[0]


def test_emit_names_the_flags_that_move_the_plan_off_the_checkpoints_formats(tmp_path, capsys):
    ckpt = checkpoint(tmp_path, dict(shipped("deepseek-r1"), quantization_config=BLOCK_FP8))
    target = str(tmp_path / "serve.yaml")
    out = run_json(capsys, "--model", ckpt, *DECODE, "--emit", target)
    assert out["precision"]["moe_weights"] == "fp8" and not out["checkpoint"]["applied"]
    assert "not planned in" not in out["checkpoint"]["note"]  # served as the checkpoint is
    out = run_json(capsys, "--model", ckpt, *DECODE, "--emit", target, "--kv-dtype", "fp8")
    assert out["precision"]["kv"] == "fp8"
    assert "not planned in: --emit plans in what moeserve serve runs (flags given: --kv-dtype fp8)" in out["checkpoint"]["note"]


def test_a_cpu_profile_keeps_fp32_and_says_why(tmp_path, capsys):
    ckpt = checkpoint(tmp_path, shipped("deepseek-r1"), MODELOPT_NVFP4)
    out = run_json(capsys, "--model", ckpt, "--hardware", "cpu", "--phase", "decode", "--batch", "1")
    assert out["precision"]["moe_weights"] == "fp32" and "a CPU profile plans in fp32" in out["checkpoint"]["note"]


def test_a_modelopt_nvfp4_checkpoints_weights_per_gpu_by_hand(tmp_path, capsys):
    """A small Qwen3-MoE in NVFP4 with attention excluded and an FP8 KV cache, on 4 GPUs (TP 1, EP 4)."""
    config = {"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 32000, "num_experts": 16, "num_experts_per_tok": 2,
              "moe_intermediate_size": 512, "intermediate_size": 3072, "torch_dtype": "bfloat16"}
    quant = {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                              "exclude_modules": ["lm_head", "model.layers.*.self_attn*", "model.layers.*.mlp.gate"]}}
    ckpt = checkpoint(tmp_path, config, quant)
    out = run_json(capsys, "--model", ckpt, "--hardware", "b200", "--phase", "decode", "--tp", "1", "--ep", "4", "--batch", "1")
    attention = 4 * 1024 * 128 * (2 * 8 + 2 * 2) * 2  # 4 layers of q, k, v, o in bf16: 20,971,520 bytes
    experts = 4 * (16 // 4) * 3 * 1024 * 512 * (0.5 + 1 / 16)  # 4 experts a GPU, NVFP4 with its fp8 scale per 16: 14,155,776
    routers = 4 * 1024 * 16 * 2  # bf16: 131,072
    vocab = 2 * 32000 * 1024 * 2  # embeddings and LM head in bf16: 131,072,000
    assert attention + experts + routers + vocab == 166_330_368
    assert out["memory"]["weights_gb"] == pytest.approx(166_330_368 / 1e9, rel=1e-12)
    # K and V, 2 heads of 128, 4 layers, fp8 (dtypes.BYTES counts fp8 with a scale per 128 x 128 values)
    assert out["memory"]["kv_bytes_per_token"] == pytest.approx(2 * 2 * 128 * 4 * (1 + 4 / 16384), rel=1e-12)


def test_gpt_oss_experts_are_named_mlp_experts_not_mixtrals_block_sparse_moe():
    """gpt-oss is read as Mixtral (num_local_experts) but names its experts model.layers.{i}.mlp.experts.*:
    a list naming them so must reach them."""
    config = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 1024,
              "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
              "head_dim": 64, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}
    quant = {"quant_method": "compressed-tensors", "config_groups": {
        "experts": {"targets": ["re:.*mlp.experts.*"], "weights": {"num_bits": 4, "type": "float"}}}}
    f = formats(dict(config, quantization_config=quant))
    assert (f.attention, f.experts) == ("bf16", "fp4")
    mixtral = formats(dict(shipped("mixtral-8x7b"), quantization_config=quant))
    assert mixtral.experts == "bf16"  # Mixtral's are block_sparse_moe.experts.*


@pytest.mark.timeout(60)
def test_a_re_pattern_that_backtracks_exponentially_under_re_does_not_hang_configure():
    """"(\\w+)+\\.x$" against a module segment of 40 word characters takes Python's re hours (2^40 ways to
    split the run); re: patterns run on the regex engine, which returns at once, with a timeout behind it."""
    quant = {"quant_method": "compressed-tensors", "ignore": ["lm_head", r"re:(\w+)+\.x$"],
             "config_groups": {"all": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}}}
    config = dict(shipped("qwen3-235b-a22b"), quantization_config=quant)
    assert formats(config).experts == "fp8"  # the pattern matches nothing: every Linear stays FP8
    patterns = _Patterns([r"re:(\w+)+\.x$"], "ignore", substring=False)
    assert "post_attention_layernorm_weight_scale_inv" * 2 not in patterns


def test_a_re_pattern_past_its_timeout_is_named_not_waited_for():
    class Stuck:
        pattern = "(a+)+$"

        def match(self, name, timeout):
            raise TimeoutError("regex timed out")

    patterns = _Patterns([], "quantization_config.ignore", substring=False)
    patterns.regexes = [Stuck()]
    with pytest.raises(ValueError, match=r"quantization_config.ignore: the pattern 're:\(a\+\)\+\$' took more than 1 s"):
        "model.layers.0.mlp.gate" in patterns
