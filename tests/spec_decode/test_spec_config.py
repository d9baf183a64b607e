"""--speculative-config: vLLM's flag and keys, as JSON on the command line, a mapping in YAML and in
LLM(...); each mistake one clear line (serve exits 2)."""
from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import pytest

from moeserve.config import EngineConfig, config_from_dict, config_to_dict
from moeserve.errors import ConfigError
from moeserve.server import cli
from moeserve.server.config_file import configs_from_args
from moeserve.settings import engine_config
from moeserve.speculative_config import SpeculativeConfig, as_plain, speculative_config
from moeserve.spec_decode.model_check import check_speculative, mtp_layer_count


def _serve(argv: list[str]) -> EngineConfig:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return configs_from_args(p.parse_args(argv))[0]


def test_json_yaml_and_keyword_give_one_config(tmp_path):
    text = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
    expected = SpeculativeConfig("ngram", 3, 2, 4)
    assert _serve(["--speculative-config", text]).speculative == expected
    f = tmp_path / "c.yaml"
    f.write_text("speculative_config: {method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 2, prompt_lookup_max: 4}\n")
    assert _serve(["--config", str(f)]).speculative == expected
    assert engine_config({"speculative_config": json.loads(text)}).speculative == expected
    # the command line replaces the file's whole object
    assert _serve(["--config", str(f), "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 1}']
                  ).speculative == SpeculativeConfig("ngram", 1)
    config = _serve(["--speculative-config", text])
    assert config_from_dict(json.loads(json.dumps(config_to_dict(config)))) == config  # travels to ranks as JSON
    assert _serve([]).speculative == SpeculativeConfig() and not SpeculativeConfig().enabled


def test_vllm_defaults_and_aliases():
    assert speculative_config({"method": "ngram", "num_speculative_tokens": 2}).ngram_sizes() == (5, 5)
    assert speculative_config({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}).ngram_sizes() == (3, 3)
    assert speculative_config({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2}).ngram_sizes() == (2, 2)
    mtp = speculative_config('{"method": "deepseek_mtp"}')
    assert mtp.is_mtp and mtp.num_drafts(mtp_layers=1) == 1
    assert speculative_config({"method": "mtp", "num_speculative_tokens": 3}).num_drafts(mtp_layers=1) == 3
    assert speculative_config("") == SpeculativeConfig() and speculative_config(None) == SpeculativeConfig()
    assert as_plain(mtp) == {"method": "mtp"} and as_plain(SpeculativeConfig()) is None


@pytest.mark.parametrize("value, message", [
    ("{method: ngram}", "not a JSON object"),
    ("[1, 2]", "must be a JSON object"),
    ({"method": "eagle", "num_speculative_tokens": 2}, "method 'eagle' is not served by moeserve; choose one of ngram, mtp"),
    ({"method": "ngram"}, "method ngram needs num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 0}, r"num_speculative_tokens must be in \[1, 16\], got 0"),
    ({"method": "ngram", "num_speculative_tokens": "3"}, "num_speculative_tokens must be an integer"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2},
     "prompt_lookup_min 4 is more than prompt_lookup_max 2"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0}, "must be >= 1"),
    ({"method": "mtp", "prompt_lookup_max": 3}, "belong to method ngram"),
    ({"num_speculative_tokens": 2}, "needs a method"),
    ({"method": "mtp", "model": "x/y"}, "key 'model' is vLLM's and not supported"),
    ({"method": "mtp", "num_spec_tokens": 2}, r"unknown speculative_config keys \['num_spec_tokens'\]; valid keys: method"),
])
def test_mistakes_are_one_line(value, message):
    with pytest.raises(ConfigError, match=message):
        speculative_config(value)


def test_serve_exits_2_on_a_bad_object(capsys):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    assert cli.run(p.parse_args(["--speculative-config", '{"method": "medusa"}'])) == 2
    err = capsys.readouterr().err
    assert "--speculative-config: method 'medusa' is not served by moeserve" in err and "Traceback" not in err


def test_llm_keyword_names_itself(monkeypatch):
    from moeserve import LLM

    with pytest.raises(ConfigError, match=r"LLM\(\): speculative_config: .*num_speculative_tokens"):
        LLM(speculative_config={"method": "ngram"})


def test_checkpoint_checks():
    v3 = SimpleNamespace(architectures=["DeepseekV3ForCausalLM"], num_nextn_predict_layers=1)
    mtp = SpeculativeConfig("mtp", 2)
    assert mtp_layer_count(v3) == 1
    check_speculative(mtp, v3)
    with pytest.raises(ConfigError, match="declares none"):
        check_speculative(mtp, SimpleNamespace(architectures=["DeepseekV3ForCausalLM"], num_nextn_predict_layers=0))
    with pytest.raises(ConfigError, match="this one is MixtralForCausalLM: use method ngram"):
        check_speculative(mtp, SimpleNamespace(architectures=["MixtralForCausalLM"]))
    check_speculative(SpeculativeConfig("ngram", 3), SimpleNamespace(architectures=["MixtralForCausalLM"]))


def test_mtp_on_the_builtin_model_is_refused_at_start():
    with pytest.raises(ConfigError, match="this one is MixtralForCausalLM"):
        from moeserve.engine.startup_checks import check_startup

        check_startup(engine_config({"speculative_config": {"method": "mtp"}}))
