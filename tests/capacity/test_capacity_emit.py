"""`moeserve configure --emit`: the file is a config `moeserve serve` accepts, and (cpu profile)
one that serves the built-in model here."""
from __future__ import annotations

import argparse
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
    """A multi-node config is served under torchrun, which sets these on every rank."""
    world = data["ep"] if data["ep"] > 1 else data["tp"]
    for key, value in dict(RANK="0", WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT="29500").items():
        monkeypatch.setenv(key, value)


def test_emitted_gpu_config_is_accepted_by_the_serve_loader(tmp_path, capsys, monkeypatch):
    out = tmp_path / "serve.yaml"
    assert main(["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "16", "--isl", "2000", "--osl", "400",
                 "--tpot-slo-ms", "100", "--emit", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    assert data["model"] == "deepseek-v3" and data["dtype"] == "bfloat16" and data["block_size"] == 64
    as_under_torchrun(monkeypatch, data)
    engine, _ = configs_from_args(serve_args(out))
    assert engine.parallel.tp == data["tp"] and engine.parallel.ep == data["ep"]
    assert engine.scheduler.max_num_seqs == data["max_num_seqs"]
    prefill = out.with_name("serve.prefill.yaml")
    if prefill.exists():  # a prefill/decode split writes both sides
        as_under_torchrun(monkeypatch, yaml.safe_load(prefill.read_text()))
        configs_from_args(serve_args(prefill))


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
