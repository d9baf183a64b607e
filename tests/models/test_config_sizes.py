"""config.json's sizes against the checkpoint's tensors (models/config_sizes.py): absurd or edited
sizes are refused with one line naming the field and the tensor before anything is allocated
(`moeserve serve` exits 2), and every real checkpoint of the test suite still passes."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from tiny_models import ARCHITECTURES, make_checkpoint

from moeserve.errors import ConfigError
from moeserve.models.config_sizes import check_config_sizes, tensor_shapes


def _fields(path):
    return argparse.Namespace(**json.loads((path / "config.json").read_text()))


def _edit(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(cfg | changes))


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return make_checkpoint("qwen3_moe", tmp_path_factory.mktemp("qwen3"))[1]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_tiny_checkpoint_passes(arch, tmp_path):
    _, path = make_checkpoint(arch, tmp_path)
    check_config_sizes(path, _fields(path))


def test_deepseek_fp8_and_builtin_checkpoints_pass(tmp_path):
    from fp8_models import make_fp8_checkpoint

    from moeserve.engine.builtin_model import builtin_model_dir

    for arch in ("deepseek_v3", "qwen3_moe"):
        _, path = make_fp8_checkpoint(arch, tmp_path / arch)
        check_config_sizes(path, _fields(path))
        check_config_sizes(path.parent / "dequantized", _fields(path.parent / "dequantized"))
    builtin = builtin_model_dir()
    check_config_sizes(builtin, _fields(builtin))


@pytest.mark.parametrize("changes,needle", [
    ({"num_hidden_layers": 10000000}, "num_hidden_layers 10000000 does not match the checkpoint: it has no tensor of "
                                      "layer 2 (model.layers.2.*; it holds layers 0-1)"),
    ({"vocab_size": 1e12}, "vocab_size must be a non-negative integer, got 1000000000000.0"),
    ({"vocab_size": 10**12}, "vocab_size 1000000000000 does not match the checkpoint's model.embed_tokens.weight [96, 64]"),
    ({"hidden_size": 1 << 40}, "hidden_size 1099511627776 does not match the checkpoint's model.embed_tokens.weight"),
    ({"num_experts": 100000}, "num_experts 100000 does not match the checkpoint's model.layers.0.mlp.gate.weight [8, 64]"),
    ({"num_experts_per_tok": 9}, "num_experts_per_tok 9 is more than the 8 experts"),
    ({"moe_intermediate_size": 1 << 30}, "moe_intermediate_size 1073741824 does not match the checkpoint's "
                                         "model.layers.0.mlp.experts.0.gate_proj.weight [48, 64]"),
    ({"num_attention_heads": 4096}, "num_attention_heads 4096 does not match the checkpoint's "
                                    "model.layers.0.self_attn.q_proj.weight [64, 64]"),
    ({"head_dim": 100000}, "num_attention_heads 4 does not match the checkpoint's model.layers.0.self_attn.q_proj.weight"),
    ({"num_key_value_heads": 1000}, "num_key_value_heads 1000 does not match the checkpoint's "
                                    "model.layers.0.self_attn.k_proj.weight [32, 64]"),
    ({"num_hidden_layers": -1}, "num_hidden_layers must be a non-negative integer, got -1"),
    ({"num_experts": True}, "num_experts must be a non-negative integer, got True"),
])
def test_absurd_sizes_are_named_with_the_tensor(qwen3, changes, needle):
    fields = argparse.Namespace(**(vars(_fields(qwen3)) | changes))
    with pytest.raises(ConfigError) as e:
        check_config_sizes(qwen3, fields)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_mla_and_shared_expert_sizes_are_checked(tmp_path):
    from fp8_models import make_fp8_checkpoint

    _, path = make_fp8_checkpoint("deepseek_v3", tmp_path)
    fields = vars(_fields(path))
    for changes, needle in [
        ({"kv_lora_rank": 4000}, "kv_lora_rank 4000 does not match the checkpoint's "
                                 "model.layers.0.self_attn.kv_a_proj_with_mqa.weight [48, 144]"),
        ({"qk_nope_head_dim": 99}, "num_attention_heads 4 does not match the checkpoint's model.layers.0.self_attn.q_b_proj"),
        ({"n_shared_experts": 1000}, "n_shared_experts 1000 does not match the checkpoint's "
                                     "model.layers.1.mlp.shared_experts.gate_proj.weight [72, 144]"),
        ({"n_routed_experts": 64}, "n_routed_experts 64 does not match the checkpoint's model.layers.1.mlp.gate.weight"),
        ({"intermediate_size": 7}, "intermediate_size 7 does not match the checkpoint's model.layers.0.mlp.gate_proj"),
    ]:
        with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            check_config_sizes(path, argparse.Namespace(**(fields | changes)))


def test_shapes_come_from_the_headers_of_every_shard(tmp_path):
    from fp8_models import make_fp8_checkpoint

    _, path = make_fp8_checkpoint("qwen3_moe", tmp_path)
    shapes = tensor_shapes(path)
    assert shapes["model.layers.1.mlp.experts.7.down_proj.weight"] == (144, 72)
    assert shapes["model.layers.1.mlp.experts.7.down_proj.weight_scale_inv"] == (2, 1)


@pytest.mark.parametrize("changes,needle", [
    ({"num_hidden_layers": 10000000}, "num_hidden_layers 10000000 does not match the checkpoint"),
    ({"vocab_size": 1e12}, "vocab_size must be a non-negative integer"),
])
def test_serve_exits_2_with_one_line_before_loading(qwen3, tmp_path, changes, needle, capsys):
    from moeserve.server import cli

    edited = tmp_path / "edited"
    edited.mkdir()
    for f in qwen3.iterdir():
        (edited / f.name).symlink_to(f)
    (edited / "config.json").unlink()
    (edited / "config.json").write_text((qwen3 / "config.json").read_text())
    _edit(edited, **changes)
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    assert cli.run(p.parse_args(["--model", str(edited)])) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("field", ["num_key_value_heads", "num_attention_heads", "num_experts_per_tok", "num_experts",
                                   "num_hidden_layers", "vocab_size"])
def test_sizes_other_sizes_are_divided_by_are_at_least_one(qwen3, field):
    """num_key_value_heads 0 ended in a ValueError inside the engine (exit 1), num_experts_per_tok 0 served
    a top-0 MoE: both are refused with the field named."""
    with pytest.raises(ConfigError, match=f"{field} must be at least 1, got 0"):
        check_config_sizes(qwen3, argparse.Namespace(**(vars(_fields(qwen3)) | {field: 0})))


def test_sizes_the_checkpoint_cannot_check_are_refused(qwen3, tmp_path):
    """A directory without safetensors, or with tensors named otherwise, left every size unchecked:
    num_hidden_layers 10000000 beside them grew the engine until memory ran out."""
    from safetensors.numpy import save_file

    fields = argparse.Namespace(**(vars(_fields(qwen3)) | {"num_hidden_layers": 10000000}))
    with pytest.raises(ConfigError, match="no \\*.safetensors weights beside it"):
        check_config_sizes(tmp_path, fields)
    save_file({"x": np.zeros(1, np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ConfigError, match="vocab_size and hidden_size cannot be checked: the checkpoint has no "
                                          "model.embed_tokens.weight"):
        check_config_sizes(tmp_path, fields)
    save_file({"model.embed_tokens.weight": np.zeros((96, 64), np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ConfigError, match="num_hidden_layers 10000000 cannot be checked: the checkpoint has no tensor "
                                          "of any layer"):
        check_config_sizes(tmp_path, fields)


@pytest.mark.parametrize("text,needle", [("[" * 100_000 + "]" * 100_000, "nests too deep"),
                                         ("[]", "must hold a JSON object"),
                                         ('{"architectures": 5}', "architectures must be a list of class names")])
def test_a_config_json_that_is_no_config_is_one_line_at_start_up(tmp_path, text, needle):
    """They ended in RecursionError, TypeError (inside the engine, after it started) or an IndexError."""
    from moeserve.config import EngineConfig, ModelConfig
    from moeserve.engine.startup_checks import check_startup

    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConfigError, match=needle) as e:
        check_startup(EngineConfig(model=ModelConfig(model=str(tmp_path))))
    assert "\n" not in str(e.value)
