"""`moeserve configure --emit`: the file is a config `moeserve serve` accepts, and (cpu profile)
one that serves the built-in model here."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from moeserve.capacity.cli import main
from moeserve.server.config_file import add_flags, configs_from_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_harness import ServerProcess  # noqa: E402


def serve_args(path: Path) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    add_flags(p)
    return p.parse_args(["--config", str(path)])


def as_under_torchrun(monkeypatch, data: dict) -> None:
    """A multi-node config is served under torchrun, which sets these on every rank; the hosts' shared
    interface is one this machine may not have (the loopback is refused with --nodes > 1)."""
    world = data["ep"] if data["ep"] > 1 else data["tp"]
    for key, value in dict(RANK="0", WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT="29500").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("moeserve.engine.launch_check.dist_interface", lambda parallel: "eth0")


def on_a_gpu_machine(monkeypatch) -> None:
    """A GPU config (device cuda, kernels triton) checked as a GPU machine would check it: torch sees CUDA."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)


def test_emitted_gpu_config_is_accepted_by_the_serve_loader(tmp_path, capsys, monkeypatch):
    out = tmp_path / "serve.yaml"
    assert main(["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "16", "--isl", "2000", "--osl", "400",
                 "--tpot-slo-ms", "100", "--emit", str(out)]) == 0
    printed = capsys.readouterr().out
    data = yaml.safe_load(out.read_text())
    header = out.read_text().split("\nmodel:")[0]
    # a shipped name is no checkpoint: a placeholder naming the repository to fetch, and a comment saying so,
    # with what serve makes of the release: DeepSeek-V3 ships block FP8, which the triton kernels keep
    assert data["model"] == "<local directory of deepseek-ai/DeepSeek-V3>" and "local copy of deepseek-ai/DeepSeek-V3" in header
    assert "the release is block FP8, kept in FP8 on GPUs by the triton kernels" in header and "dequantized to bfloat16 at load" not in header
    # planned in what the file runs: FP8 weights (kv_b_proj in bf16), a bf16 KV cache, on the triton kernels
    assert data["dtype"] == "bfloat16" and data["block_size"] == 64
    assert (data["device"], data["kernels"], data["quantization"], data["kv_cache_dtype"]) == ("cuda", "triton", "none", "auto")
    assert "weights fp8 (MLA kv_b_proj bf16), KV bf16" in header
    assert "formats: weights fp8 (MLA kv_b_proj bf16), KV bf16" in printed
    written = [line for line in printed.splitlines() if line.startswith("wrote ")]
    assert written and written[0].startswith(f"wrote {out}:") and all(w.endswith("weights fp8, KV bf16") for w in written)
    as_under_torchrun(monkeypatch, data)
    on_a_gpu_machine(monkeypatch)
    # the checkpoint is not on this machine (nor downloaded by a test): the model taken as given
    monkeypatch.setattr("moeserve.engine.model_source.resolve_model_path", lambda model: model)
    engine, _ = configs_from_args(serve_args(out))
    assert engine.parallel.tp == data["tp"] and engine.parallel.ep == data["ep"]
    assert engine.scheduler.max_num_seqs == data["max_num_seqs"]
    assert (engine.device.device, engine.device.kernels) == ("cuda", "triton")
    prefill = out.with_name("serve.prefill.yaml")
    assert prefill.exists() == (len(written) == 2)  # a prefill/decode split writes both sides and names both
    if prefill.exists():
        assert any(line.startswith(f"wrote {prefill}:") for line in written)
        as_under_torchrun(monkeypatch, yaml.safe_load(prefill.read_text()))
        configs_from_args(serve_args(prefill))


def test_a_plan_with_mtp_emits_its_speculative_config(tmp_path, capsys, monkeypatch):
    out = tmp_path / "mtp.yaml"
    assert main(["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "16", "--isl", "2000", "--osl", "400",
                 "--mtp-accept", "1.8", "--emit", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    assert data["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 1}
    out_plain = tmp_path / "plain.yaml"
    assert main(["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "16", "--isl", "2000", "--osl", "400",
                 "--emit", str(out_plain)]) == 0
    assert yaml.safe_load(out_plain.read_text())["speculative_config"] is None


def test_emit_names_both_sides_of_a_split_and_a_real_checkpoint_path(tmp_path, capsys):
    ckpt = tmp_path / "DeepSeek-V3"
    ckpt.mkdir()
    cfg = Path(__file__).resolve().parents[2] / "moeserve" / "capacity" / "models" / "deepseek-v3.json"
    (ckpt / "config.json").write_text(cfg.read_text())
    out = tmp_path / "pd.yaml"
    # 64 GPUs, short prompts, long outputs, tight TPOT: a split wins here
    assert main(["--model", str(ckpt / "config.json"), "--hardware", "h200", "--gpus", "64", "--isl", "4000", "--osl", "200",
                 "--tpot-slo-ms", "60", "--ttft-slo-ms", "4000", "--emit", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["emitted"][0] == str(out) and all(f"wrote {p}:" in captured.err for p in data["emitted"])
    assert yaml.safe_load(out.read_text())["model"] == str(ckpt)
    if data["phase"] == "disaggregated":
        assert data["emitted"] == [str(out), str(tmp_path / "pd.prefill.yaml")]
        assert "this file is the prefill side" in (tmp_path / "pd.prefill.yaml").read_text()


def test_a_split_whose_prefill_file_cannot_be_written_writes_neither_side(tmp_path, capsys):
    (tmp_path / "pd.prefill.yaml").mkdir()  # the prefill side's name is taken by a directory
    out = tmp_path / "pd.yaml"
    assert main(["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "64", "--isl", "4000", "--osl", "200",
                 "--tpot-slo-ms", "60", "--ttft-slo-ms", "4000", "--emit", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pd.prefill.yaml" in err[0] and "not a directory" in err[0]
    assert not out.exists()


@pytest.mark.slow
def test_emitted_cpu_config_starts_a_server(tmp_path, capsys):
    out = tmp_path / "serve.yaml"
    assert main(["--hardware", "cpu", "--gpus", "1", "--isl", "32", "--osl", "16", "--tpot-slo-ms", "2000",
                 "--emit", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    assert data["model"] is None and data["dtype"] == "float32" and data["tp"] == data["ep"] == 1
    engine, _ = configs_from_args(serve_args(out))
    assert engine.cache.kv_cache_memory_mb == data["kv_cache_memory_mb"] <= 1024
    server = ServerProcess("--config", str(out), startup_timeout_s=600)
    try:
        r = httpx.post(server.url + "/v1/completions", json={"model": server.model, "prompt": "hello", "max_tokens": 4},
                       timeout=120)
        assert r.status_code == 200 and r.json()["choices"][0]["text"] is not None
    finally:
        server.terminate()
        assert server.wait(60) == 0


def test_emit_refuses_pipeline_parallelism(tmp_path, capsys):
    """moeserve serve runs no pipeline parallelism: --emit with --pp > 1 exits 2 with one line and writes nothing."""
    target = tmp_path / "serve.yaml"
    try:
        code = main(["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "16", "--pp", "2", "--isl", "2000",
                     "--osl", "400", "--emit", str(target)])
    except SystemExit as stop:
        code = stop.code
    assert code == 2 and not target.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no pipeline parallelism" in err[0] and "--pp 2" in err[0]



def test_emit_into_a_missing_directory_is_one_line(tmp_path, capsys):
    """An --emit path whose directory does not exist, a directory itself or no name at all ("" used to write
    nothing and exit 0, "." and "/" to fail after planning on an empty name) exits 2 with one line before any
    planning, and writes nothing."""
    cases = ((tmp_path / "no" / "serve.yaml", "no such directory"), (tmp_path, "not a directory"),
             ("", "name a file"), (".", "name a file"), ("/", "name a file"), (f"{tmp_path}/..", "name a file"))
    for target, said in cases:
        try:
            code = main(["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "8", "--emit", str(target)])
        except SystemExit as stop:
            code = stop.code
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and said in err[0], err
    assert not (tmp_path / "no").exists()

# --- the formats moeserve serve runs a checkpoint in ----------------------------------------------------------
BLOCK_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
# a small DeepSeek-V3: MLA (q_lora 256, kv_lora 128), 4 layers (1 dense), 16 routed experts + 1 shared
TINY_MLA = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 1024,
            "intermediate_size": 2048, "moe_intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
            "num_key_value_heads": 8, "n_routed_experts": 16, "n_shared_experts": 1, "num_experts_per_tok": 2,
            "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1, "topk_group": 1, "q_lora_rank": 256,
            "kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64, "vocab_size": 32000,
            "max_position_embeddings": 65536, "num_nextn_predict_layers": 0, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16"}
FP8 = 1 + 4 / 16384  # bytes of an fp8 weight with its fp32 scale per 128 x 128 block
# on 4 H200s, TP 1, EP 4: 4 routed experts a GPU
DECODE = ("--hardware", "h200", "--phase", "decode", "--tp", "1", "--ep", "4", "--batch", "16", "--isl", "30000",
          "--osl", "2000")


def checkpoint_dir(tmp_path: Path, name: str, quant: dict | None = None, config: dict = TINY_MLA) -> str:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(dict(config, quantization_config=quant) if quant else config))
    return str(directory)


def emit_json(capsys, tmp_path: Path, name: str, *argv: str) -> tuple[dict, dict, str]:
    """(configure's --json, the emitted YAML, its text) of one --emit run that must succeed."""
    out = tmp_path / f"{name}.yaml"
    assert main([*argv, "--emit", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    text = out.read_text()
    return data, yaml.safe_load(text), text


def loads_in_serve(path: Path, monkeypatch) -> None:
    """The file through moeserve serve's own reader: every key a setting of its type (settings.py), the engine
    config validated with the start-up checks (kernels against --quantization, the checkpoint's quantization,
    the layout); the fixture has no tensors to check config.json's sizes against."""
    on_a_gpu_machine(monkeypatch)
    as_under_torchrun(monkeypatch, yaml.safe_load(path.read_text()))
    monkeypatch.setattr("moeserve.engine.layout_check.check_config_sizes", lambda *args: None)
    engine, _ = configs_from_args(serve_args(path))
    assert engine.model.quantization == yaml.safe_load(path.read_text())["quantization"]


def test_a_block_fp8_checkpoint_is_planned_in_fp8_as_the_triton_kernels_keep_it(tmp_path, capsys, monkeypatch):
    ckpt = checkpoint_dir(tmp_path, "fp8", BLOCK_FP8)
    data, settings, text = emit_json(capsys, tmp_path, "fp8", "--model", ckpt, *DECODE)
    assert data["precision"]["moe_weights"] == data["precision"]["attention_weights"] == "fp8"
    assert data["precision"]["kv_b_proj_weights"] == "bf16" and data["precision"]["kv"] == "bf16"
    # kept FP8 only by a kernel set with FP8 weights: the file names it, and quantizes nothing more
    assert (settings["device"], settings["kernels"], settings["dtype"], settings["quantization"],
            settings["kv_cache_dtype"]) == ("cuda", "triton", "bfloat16", "none", "auto")
    assert "kept FP8 by the triton kernels" in text and "dequantized to bfloat16 at load" not in text
    # by hand: per layer MLA down (1024 x 416), q_b (256 x 8 x 96), o (512 x 1024) in fp8, kv_b (128 x 8 x 128)
    # in bf16; one dense MLP (3 x 1024 x 2048) and 3 MoE layers of a shared expert and 4 routed (3 x 1024 x 512
    # each) in fp8, routers (1024 x 16) and embeddings + LM head (2 x 32000 x 1024) in bf16
    fp8 = 4 * (1024 * 416 + 256 * 8 * 96 + 8 * 64 * 1024) + 3 * 1024 * 2048 + 3 * 5 * 3 * 1024 * 512
    bf16 = 4 * 128 * 8 * 128 + 3 * 1024 * 16 + 2 * 32000 * 1024
    assert (fp8, bf16) == (34_471_936, 66_109_440)
    assert data["memory"]["weights_gb"] == pytest.approx((fp8 * FP8 + bf16 * 2) / 1e9, rel=1e-12)
    loads_in_serve(tmp_path / "fp8.yaml", monkeypatch)


def test_kv_dtype_fp8_is_kv_cache_dtype_fp8_and_halves_the_kv_bytes(tmp_path, capsys, monkeypatch):
    ckpt = checkpoint_dir(tmp_path, "fp8", BLOCK_FP8)
    bf16, bf16_yaml, _ = emit_json(capsys, tmp_path, "bf16kv", "--model", ckpt, *DECODE)
    fp8, fp8_yaml, text = emit_json(capsys, tmp_path, "fp8kv", "--model", ckpt, *DECODE, "--kv-dtype", "fp8")
    assert fp8_yaml["kv_cache_dtype"] == "fp8" and bf16_yaml["kv_cache_dtype"] == "auto"
    # the latent and rope key (128 + 32) of 4 layers: 2 bytes each in bf16, 1 (and its scale) in fp8
    assert bf16["memory"]["kv_bytes_per_token"] == 160 * 4 * 2
    assert fp8["memory"]["kv_bytes_per_token"] == pytest.approx(160 * 4 * FP8, rel=1e-12)
    assert fp8_yaml["kv_cache_memory_mb"] == pytest.approx(bf16_yaml["kv_cache_memory_mb"] / 2, rel=0.01)
    assert fp8["memory"]["weights_gb"] == bf16["memory"]["weights_gb"]
    # serve's attention kernels upcast the cache: the plan computes attention in bf16, and the header says so
    assert fp8["precision"]["attention_compute"] == "bf16" and "attention upcasts them to bfloat16" in text
    loads_in_serve(tmp_path / "fp8kv.yaml", monkeypatch)


def test_fp8_weights_of_a_bf16_checkpoint_are_quantization_fp8(tmp_path, capsys, monkeypatch):
    ckpt = checkpoint_dir(tmp_path, "bf16")
    plain, plain_yaml, _ = emit_json(capsys, tmp_path, "plain", "--model", ckpt, *DECODE)
    assert plain["precision"]["moe_weights"] == "bf16" and plain_yaml["quantization"] == "none"
    online, online_yaml, text = emit_json(capsys, tmp_path, "online", "--model", ckpt, *DECODE, "--weights", "fp8")
    assert online_yaml["quantization"] == "fp8" and online_yaml["kernels"] == "triton"
    assert "quantization: fp8 quantizes at load" in text and "kv_b_proj stay bfloat16" in text
    # online FP8 quantizes what an FP8 release ships in FP8, and keeps kv_b_proj, routers and the LM head bf16
    fp8_ckpt = checkpoint_dir(tmp_path, "fp8", BLOCK_FP8)
    released, _, _ = emit_json(capsys, tmp_path, "released", "--model", fp8_ckpt, *DECODE)
    assert online["memory"]["weights_gb"] == released["memory"]["weights_gb"] < plain["memory"]["weights_gb"]
    for name in ("plain", "online"):
        loads_in_serve(tmp_path / f"{name}.yaml", monkeypatch)


@pytest.mark.parametrize("argv, needle", [
    (("--weights", "fp4"), "runs no FP4 weights"),
    (("--kv-dtype", "fp4"), "runs no FP4 KV cache"),
    (("--moe-weights", "fp8"), "pass --weights fp8"),  # online FP8 quantizes every linear layer, not experts alone
    (("--weights", "fp8", "--attn-weights", "bf16"), "pass --weights fp8"),
    (("--weights", "bf16", "--kv-dtype", "fp16"), "one dtype"),
    (("--dispatch-dtype", "fp8",), "tokens to the experts"),
])
def test_formats_moeserve_serve_does_not_run_exit_2_with_one_line(tmp_path, capsys, argv, needle):
    out = tmp_path / "x.yaml"
    assert main(["--model", checkpoint_dir(tmp_path, "bf16"), *DECODE, *argv, "--emit", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "(drop --emit to plan it)" in err[0] and not out.exists()


def test_an_fp8_checkpoint_is_not_dequantized_on_gpus_by_a_flag(tmp_path, capsys):
    """The triton kernels keep FP8 weights: bf16 for them is not what serve runs on a GPU."""
    assert main(["--model", checkpoint_dir(tmp_path, "fp8", BLOCK_FP8), *DECODE, "--attn-weights", "bf16",
                 "--emit", str(tmp_path / "x.yaml")]) == 2
    assert "keep this checkpoint's FP8 weights in FP8: attention bf16" in capsys.readouterr().err


def test_a_cpu_profile_plans_an_fp8_checkpoint_dequantized(tmp_path, capsys):
    ckpt = checkpoint_dir(tmp_path, "fp8", BLOCK_FP8)
    argv = ("--model", ckpt, "--hardware", "cpu", "--phase", "decode", "--batch", "1", "--isl", "32", "--osl", "16")
    data, settings, text = emit_json(capsys, tmp_path, "cpu", *argv)
    assert data["precision"]["moe_weights"] == data["precision"]["attention_weights"] == "fp32"
    assert (settings["device"], settings["kernels"], settings["dtype"], settings["quantization"]) == (
        "cpu", "cpu", "float32", "none")
    assert "dequantized to float32 at load" in text
    assert main([*argv, "--weights", "fp8", "--emit", str(tmp_path / "x.yaml")]) == 2
    assert "on CPUs its kernels run no FP8 weights" in capsys.readouterr().err


GPT_OSS = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 1024,
           "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
           "head_dim": 64, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_mxfp4_experts_are_planned_dequantized_and_nvfp4_is_refused(tmp_path, capsys, monkeypatch):
    """moeserve has no FP4 kernels: gpt-oss's MXFP4 experts run dequantized (models/mxfp4.py), a ModelOpt
    NVFP4 checkpoint does not load."""
    ckpt = checkpoint_dir(tmp_path, "gpt-oss", {"quant_method": "mxfp4"}, GPT_OSS)
    argv = ("--model", ckpt, "--hardware", "h200", "--phase", "decode", "--tp", "1", "--ep", "4", "--batch", "16")
    data, settings, text = emit_json(capsys, tmp_path, "gpt-oss", *argv)
    assert data["precision"]["moe_weights"] == "bf16" and settings["quantization"] == "none"
    assert "MXFP4 experts dequantized to bfloat16 at load" in text
    assert main([*argv, "--moe-weights", "fp4", "--emit", str(tmp_path / "x.yaml")]) == 2
    assert "runs no FP4 weights" in capsys.readouterr().err
    nvfp4 = checkpoint_dir(tmp_path, "nvfp4", {"quant_method": "modelopt", "quant_algo": "NVFP4"})
    assert main(["--model", nvfp4, *DECODE, "--emit", str(tmp_path / "y.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "loads no quant_method 'modelopt'" in err[0]


@pytest.mark.parametrize("quant", [
    None, BLOCK_FP8, {"quant_method": "fp8"}, dict(BLOCK_FP8, weight_block_size=[128]),
    dict(BLOCK_FP8, fmt="e5m2"), dict(BLOCK_FP8, activation_scheme="static"), {"quant_method": "mxfp4"},
    {"quant_method": "modelopt", "quant_algo": "FP8"}, {"quant_method": "compressed-tensors"}, {"quant_method": "awq"},
])
def test_emit_refuses_exactly_the_checkpoints_moeserve_serve_refuses(quant):
    """served.py mirrors models/quantization.py (capacity/ may not import model code): the two agree."""
    from types import SimpleNamespace

    from moeserve.capacity.served import unloadable
    from moeserve.errors import ConfigError
    from moeserve.models.quantization import check_quantization

    cfg = dict(TINY_MLA, quantization_config=quant) if quant else dict(TINY_MLA)
    try:
        check_quantization(SimpleNamespace(**cfg))
        serve_loads = True
    except ConfigError:
        serve_loads = False
    assert serve_loads == (unloadable(cfg, False) == "")


@pytest.mark.parametrize("architectures", [5, "GptOssForCausalLM", [], None])
def test_an_mxfp4_checkpoint_without_a_list_of_architectures_is_refused_in_one_line(tmp_path, capsys, architectures):
    """config.json's architectures is a list; anything else names no architecture (not a TypeError traceback)."""
    ckpt = checkpoint_dir(tmp_path, "gpt-oss", {"quant_method": "mxfp4"}, dict(GPT_OSS, architectures=architectures))
    out = tmp_path / "x.yaml"
    assert main(["--model", ckpt, *DECODE, "--emit", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "loads mxfp4 for GptOssForCausalLM only" in err[0] and not out.exists()


def test_a_block_fp8_checkpoint_with_bf16_attention_says_nothing_of_dequantizing_kv_b(tmp_path, capsys, monkeypatch):
    """modules_to_not_convert keeps attention in bf16: kv_b_proj is bf16 in the checkpoint, nothing to dequantize."""
    ckpt = checkpoint_dir(tmp_path, "fp8", dict(BLOCK_FP8, modules_to_not_convert=["self_attn"]))
    data, settings, text = emit_json(capsys, tmp_path, "fp8", "--model", ckpt, *DECODE)
    assert (data["precision"]["attention_weights"], data["precision"]["moe_weights"]) == ("bf16", "fp8")
    assert "kv_b_proj_weights" not in data["precision"] and settings["quantization"] == "none"
    assert "kept FP8 by the triton kernels (its other modules in bfloat16)" in text and "kv_b_proj" not in text
    loads_in_serve(tmp_path / "fp8.yaml", monkeypatch)
