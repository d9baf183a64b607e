import json

import pytest

from moeserve import LLM, cli
from moeserve.config import ConfigError


def test_unsupported_architecture_names_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    with pytest.raises(ValueError, match="unsupported architecture 'GPT2LMHeadModel'.*MixtralForCausalLM"):
        LLM(model=str(tmp_path))


@pytest.mark.parametrize("flags", [dict(ep=2), dict(tp=2), dict(ep=4, tp=2)])
def test_unsupported_architecture_is_refused_before_any_rank_starts(tmp_path, monkeypatch, flags):
    # with --ep / --tp the message used to come from inside every rank, seconds later
    from moeserve.engine import engine_core

    monkeypatch.setattr(engine_core, "make_executor", lambda *a, **k: pytest.fail("started an executor"))
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    with pytest.raises(ConfigError, match="unsupported architecture 'GPT2LMHeadModel'.*MixtralForCausalLM"):
        LLM(model=str(tmp_path), **flags)


def test_serve_names_the_supported_architectures_and_exits_2(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    assert cli.main(["serve", "--model", str(tmp_path), "--ep", "2", "--port", "0"]) == 2
    assert "unsupported architecture 'LlamaForCausalLM'; moeserve supports: DeepseekV2ForCausalLM" in capsys.readouterr().err


@pytest.mark.parametrize("architecture,nearest", [
    ("Glm4MoeLiteForCausalLM", "Glm4MoeForCausalLM"), ("DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM"),
    ("Qwen3NextForCausalLM", "Qwen3MoeForCausalLM"), ("MiniMaxForCausalLM", "MiniMaxM2ForCausalLM"),
    ("GptOssForSequenceClassification", "GptOssForCausalLM"),
])
def test_the_error_names_the_nearest_supported_architecture(tmp_path, architecture, nearest):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": [architecture], "model_type": "x"}))
    with pytest.raises(ConfigError, match=f"unsupported architecture '{architecture}'; moeserve supports: .*"
                                          f"GptOssForCausalLM.*; the nearest by name is {nearest}$"):
        LLM(model=str(tmp_path), ep=2)
