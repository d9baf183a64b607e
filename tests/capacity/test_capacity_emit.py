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


def test_emitted_gpu_config_is_accepted_by_the_serve_loader(tmp_path, capsys, monkeypatch):
    out = tmp_path / "serve.yaml"
    assert main(["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "16", "--isl", "2000", "--osl", "400",
                 "--tpot-slo-ms", "100", "--emit", str(out)]) == 0
    printed = capsys.readouterr().out
    data = yaml.safe_load(out.read_text())
    header = out.read_text().split("\nmodel:")[0]
    # a shipped name is no checkpoint: a placeholder naming the repository to fetch, and a comment saying so
    assert data["model"] == "<local directory of deepseek-ai/DeepSeek-V3>" and "local copy of deepseek-ai/DeepSeek-V3" in header
    # planned in what the file runs: bfloat16 everywhere, no FP8 claimed in the header
    assert data["dtype"] == "bfloat16" and data["block_size"] == 64
    assert "weights bf16, KV bf16" in header and "fp8" not in header
    assert "formats: weights bf16, KV bf16" in printed
    written = [line for line in printed.splitlines() if line.startswith("wrote ")]
    assert written and written[0].startswith(f"wrote {out}:")
    as_under_torchrun(monkeypatch, data)
    # the checkpoint is not on this machine (nor downloaded by a test): the model taken as given
    monkeypatch.setattr("moeserve.engine.model_source.resolve_model_path", lambda model: model)
    engine, _ = configs_from_args(serve_args(out))
    assert engine.parallel.tp == data["tp"] and engine.parallel.ep == data["ep"]
    assert engine.scheduler.max_num_seqs == data["max_num_seqs"]
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
