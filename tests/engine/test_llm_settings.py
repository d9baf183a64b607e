"""`LLM(**settings)` takes the same settings, names and defaults as `moeserve serve` and its YAML files
(moeserve/settings.py), apart from the flags whose `serve_default` says why the server differs."""
from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from moeserve import LLM
from moeserve.config import EngineConfig
from moeserve.engine import llm as llm_module
from moeserve.errors import ConfigError
from moeserve.server import cli
from moeserve.server.config_file import configs_from_args
from moeserve.settings import ENGINE_FLAGS, ENGINE_KEYS


class _Captured(Exception):
    pass


@pytest.fixture
def built(monkeypatch):
    """The EngineConfig an LLM(...) call hands its engine (no engine is built)."""

    def capture(config):
        raise _Captured(config)

    monkeypatch.setattr(llm_module, "EngineCore", capture)

    def build(**settings) -> EngineConfig:
        with pytest.raises(_Captured) as got:
            LLM(**settings)
        return got.value.args[0]

    return build


def _serve(argv: list[str]) -> EngineConfig:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return configs_from_args(parser.parse_args(argv))[0]


def _differing_from_serve() -> EngineConfig:
    """EngineConfig() with the server's own defaults applied (the serve_default flags)."""
    config = EngineConfig()
    for flag in ENGINE_FLAGS:
        if flag.serve_default is not None:
            section, name = flag.target.split(".")
            config = dataclasses.replace(config, **{section: dataclasses.replace(getattr(config, section),
                                                                                 **{name: flag.serve_default})})
    return config


def test_llm_defaults_are_the_configs_and_the_servers(built):
    config = built()
    assert config == EngineConfig()
    assert config.scheduler.max_num_seqs == 128 and config.scheduler.max_num_batched_tokens == 2048
    assert _serve([]) == _differing_from_serve()
    differing = {f.key for f in ENGINE_FLAGS if f.serve_default is not None}
    assert differing == {"reserved_cores", "split_prefill_bursts"}  # each with its reason in settings.py


def test_every_flag_is_an_llm_keyword_with_the_same_meaning(built):
    argv, kwargs = ["--no-prefix-caching", "--reserved-cores", "0", "--no-split-prefill-bursts"], {}
    kwargs.update(enable_prefix_caching=False, reserved_cores=0, split_prefill_bursts=False)
    samples = {int: 2, float: 7.5, str: None, tuple: None, dict: None}
    argv += ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']  # JSON on the command line
    kwargs["speculative_config"] = {"method": "ngram", "num_speculative_tokens": 3}  # a mapping in LLM(...)
    for flag in ENGINE_FLAGS:
        if flag.key in kwargs or flag.type is bool or samples[flag.type] is None:
            continue
        value = 4 if flag.key in ("tp", "ep", "block_size", "nodes") else samples[flag.type]
        value = 0.5 if flag.key == "gpu_memory_utilization" else value  # a share of the GPU's memory
        if flag.key in ("tp", "nodes", "eplb_window"):
            continue  # kept at their defaults so the layout and the re-plan window stay valid
        argv += [flag.flag, str(value)]
        kwargs[flag.key] = value
    assert built(**kwargs) == _serve(argv)


def test_an_unknown_setting_names_the_valid_ones(built):
    with pytest.raises(TypeError, match=r"unknown settings max_num_seq; valid settings: .*max_num_seqs"):
        built(max_num_seq=3)


def test_a_setting_of_the_wrong_type_is_a_config_error(built):
    with pytest.raises(ConfigError, match=re.escape("LLM(): tp must be a int, got 'two'")):
        built(tp="two")


def test_llm_docstring_lists_every_setting():
    for key in ENGINE_KEYS:
        assert f"{key} (" in LLM.__doc__


def test_vllms_keywords_become_moeserves_settings(built):
    """Code written for vllm.LLM runs with the import changed: its common keywords translate."""
    import torch

    config = built(model="m", tensor_parallel_size=2, enable_expert_parallel=True, dtype=torch.float32,
                   trust_remote_code=True, tokenizer="m", disable_log_stats=True, pipeline_parallel_size=1,
                   enforce_eager=True, gpu_memory_utilization=0.5, seed=3, max_model_len=512)
    assert (config.parallel.tp, config.parallel.ep, config.model.dtype, config.seed) == (2, 2, "float32", 3)
    assert built(model="m", tensor_parallel_size=2, ep=4).parallel.ep == 4  # an explicit ep wins
    assert built(model="m", enable_expert_parallel=False).parallel.ep == 1
    assert built(dtype="half").model.dtype == "float16" and built(dtype="float").model.dtype == "float32"


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="m", tokenizer="other"), "tokenizer='other'"),
    (dict(pipeline_parallel_size=2), "pipeline_parallel_size=2 is not supported"),
    (dict(enable_chunked_prefill=False), "enable_chunked_prefill=False"),
    (dict(trust_remote_code="yes"), "trust_remote_code must be True or False"),
    (dict(tensor_parallel_size=2, tp=4), "disagree"),
])
def test_vllms_keywords_moeserve_cannot_honour_are_refused(built, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        built(**kwargs)
