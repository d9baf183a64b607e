"""Flags <-> YAML <-> EngineConfig: every setting reachable both ways, CLI over file, clear errors."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from moeserve.config import ConfigError, EngineConfig, config_from_dict, config_to_dict
from moeserve.server import cli
from moeserve.server.config_file import FLAGS, configs_from_args, load_yaml

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(argv)


def engine_fields() -> set[str]:
    out = set()
    for f in dataclasses.fields(EngineConfig):
        if f.default_factory is not dataclasses.MISSING:
            out |= {f"{f.name}.{g.name}" for g in dataclasses.fields(f.default_factory())}
        else:
            out.add(f"engine.{f.name}")
    return out


def test_every_engine_setting_has_a_flag():
    targets = {f.target for f in FLAGS}
    # a dict flag (speculative_config) sets every field of its part
    missing = {t for t in engine_fields() if t not in targets and t.split(".")[0] not in targets}
    assert not missing, f"add flags for {sorted(missing)} in moeserve/settings.py"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_have_every_key_commented_and_valid(path, monkeypatch):
    values = load_yaml(str(path))
    assert set(values) == {f.key for f in FLAGS}, "a deployment file lists every setting"
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            assert "#" in line, f"uncommented key: {line}"
    # the deployment's checkpoint is not on this machine (nor downloaded by a test): taken as given
    monkeypatch.setattr("moeserve.engine.model_source.resolve_model_path", lambda model: model)
    if values["nodes"] > 1:  # runs under a launcher, as its header says: rank 0 of the whole world
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", str(values["ep"] if values["ep"] > 1 else values["tp"]))
        # the hosts' shared interface, which this machine may not have (loopback is refused across hosts)
        monkeypatch.setattr("moeserve.engine.launch_check.dist_interface", lambda parallel: "eth0")
    configs_from_args(parse(["--config", str(path)]))


def test_cli_overrides_file_overrides_defaults(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("tp: 2\nmax_num_seqs: 7\nport: 9000\nenable_prefix_caching: true\n")
    engine, server = configs_from_args(parse(["--config", str(f), "--max-num-seqs", "3", "--no-prefix-caching"]))
    assert engine.parallel.tp == 2 and engine.scheduler.max_num_seqs == 3
    assert engine.cache.enable_prefix_caching is False
    assert server.port == 9000 and server.host == "127.0.0.1"
    assert engine.cache.block_size == 16  # untouched default
    assert engine.parallel.reserved_cores == 1  # serve leaves a core to its front end by default
    engine, _ = configs_from_args(parse(["--reserved-cores", "0"]))
    assert engine.parallel.reserved_cores == 0


@pytest.mark.parametrize(
    "yaml_text, argv, needle",
    [
        ("", ["--ep", "6", "--tp", "4"], "--ep 6 is not a multiple of --tp 4"),
        ("", ["--block-size", "12"], "power of two"),
        ("dtype: int3\n", [], "--dtype int3"),
        ("bogus_key: 1\n", [], "unknown keys ['bogus_key']"),
        ("tp: four\n", [], "tp must be a int"),
        ("- a\n- b\n", [], "mapping"),
        ("tp: [\n", [], "not valid YAML"),
        ("tp: 2\nmax_model_len: 256\ntp: 4\n", [], "'tp' is set twice, at lines 1 and 3"),
        ("", ["--port", "70000"], "--port"),
        ("", ["--api-key", ""], "--api-key"),
        ("", ["--reserved-cores", "-1"], "--reserved-cores must be >= 0"),
    ],
)
def test_mistakes_are_config_errors(tmp_path, yaml_text, argv, needle):
    f = tmp_path / "c.yaml"
    f.write_text(yaml_text)
    with pytest.raises(ConfigError) as e:
        configs_from_args(parse(["--config", str(f), *argv]))
    assert needle in str(e.value)


@pytest.mark.parametrize("flag, value", [("--device", "gpu"), ("--kernels", "cuda"), ("--dispatch", "nccl"),
                                         ("--dtype", "int3"), ("--tp", "four")])
def test_a_bad_flag_value_is_one_line_and_status_2(flag, value, capsys):
    from moeserve.cli import main as cli_main

    with pytest.raises(SystemExit) as stop:
        cli_main(["serve", flag, value])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and f"argument {flag}" in err and "--help" in err


def test_switches_on_by_default_have_only_their_off_form(capsys):
    from moeserve.cli import main as cli_main

    engine, _ = configs_from_args(parse(["--no-prefix-caching"]))
    assert engine.cache.enable_prefix_caching is False
    with pytest.raises(SystemExit):
        cli_main(["serve", "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert "[--no-prefix-caching]" in usage and "--enable-prefix-caching" not in usage
    for name in ("device {auto,cpu,cuda}", "kernels {auto,torch,cpu,triton}", "dispatch {auto,local,a2a,a2a_ll,agrs,shm,nvshmem,hier}"):
        assert f"--{name}" in usage


def test_bad_config_exits_before_spawning_anything(capsys):
    assert cli.run(parse(["--ep", "6", "--tp", "4"])) == 2
    assert "--ep 6 is not a multiple of --tp 4" in capsys.readouterr().err


def test_config_round_trips_through_json_dict(tmp_path):
    from moeserve.placement.plan import PlacementPlan

    plan = str(tmp_path / "p.json")
    PlacementPlan.contiguous(4, 16, 4).save(plan)  # the built-in model: 4 MoE layers of 16 experts, on 4 ranks
    engine, _ = configs_from_args(parse(["--tp", "2", "--ep", "4", "--kv-cache-blocks", "9", "--placement", plan]))
    assert config_from_dict(config_to_dict(engine)) == engine


def test_every_flag_has_help():
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    for action in p._actions:
        if action.option_strings and action.dest != "help":
            assert action.help and len(action.help) > 10, action.option_strings


@pytest.mark.parametrize("command", ["serve", "bench", "place", "trace"])
def test_help_of_every_command_renders(command, capsys):
    """argparse %-formats help strings: a bare '%' in one crashes `--help` (it once did)."""
    from moeserve.cli import main as cli_main

    with pytest.raises(SystemExit) as stop:
        cli_main([command, "--help"])
    assert stop.value.code == 0
    assert "usage: moeserve" in capsys.readouterr().out


def test_a_taken_port_fails_before_loading(capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert cli.run(parse(["--port", str(port)])) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_several_served_model_names_as_vllm_takes_them(tmp_path):
    """`--served-model-name a b` (space-separated, as vLLM's): the engine is named by the first; the
    front end also answers to the rest. In YAML a list or one name. It was an argparse error."""
    engine, server = configs_from_args(parse(["--served-model-name", "tiny", "tiny-alias", "gpt-x"]))
    assert engine.model.served_model_name == "tiny" and server.served_model_aliases == ("tiny-alias", "gpt-x")
    f = tmp_path / "c.yaml"
    f.write_text("served_model_name: [a, b]\n")
    engine, server = configs_from_args(parse(["--config", str(f)]))
    assert engine.model.served_model_name == "a" and server.served_model_aliases == ("b",)
    f.write_text("served_model_name: solo\n")
    engine, server = configs_from_args(parse(["--config", str(f)]))
    assert engine.model.served_model_name == "solo" and server.served_model_aliases == ()
    with pytest.raises(ConfigError, match="non-empty names"):
        configs_from_args(parse(["--served-model-name", ""]))


def test_the_model_is_also_served_under_the_name_given_by_model():
    """As vLLM: a client that sends the --model argument (a path, or org/name) is answered, besides
    every --served-model-name and the last path component."""
    from moeserve.builtin_model_info import builtin_model_dir

    given = str(builtin_model_dir()) + "/"
    engine, server = configs_from_args(parse(["--model", given]))
    assert engine.model.served_model_name is None and server.served_model_aliases == ()
    assert server.accepted_model_names == (given, "moeserve-tiny-moe")
    engine, server = configs_from_args(parse(["--model", given, "--served-model-name", "a", "b"]))
    assert engine.model.served_model_name == "a" and server.served_model_aliases == ("b",)
    assert server.accepted_model_names == (given, "moeserve-tiny-moe")


@pytest.mark.parametrize("argv, expected", [([], None), (["--async-scheduling"], True), (["--no-async-scheduling"], False)])
def test_a_setting_decided_at_start_up_can_be_turned_either_way(argv, expected):
    # async scheduling is unset (on with CUDA, off on CPUs): a CUDA user needs --no-async-scheduling to turn it off
    engine, _ = configs_from_args(parse(argv))
    assert engine.scheduler.async_scheduling is expected
