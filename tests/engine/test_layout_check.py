"""A model whose sizes do not split over --tp / --ep is refused before any process or rank starts, by
`LLM(...)` and by `moeserve serve`, with the config.json field, its value and the flag to change
(models/layout.py, engine/layout_check.py). The rule accepts exactly what the layers build, for every
architecture, so it forbids no layout that runs (fewer KV heads than TP ranks, 6 experts on 3 ranks)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from moeserve import LLM, cli
from moeserve.config import ConfigError, EngineConfig, ModelConfig, ParallelConfig
from moeserve.engine import engine_core
from moeserve.engine.multiproc_executor import MultiprocExecutor
from moeserve.engine.startup_checks import check_startup
from moeserve.models.registry import check_layout, model_class
from moeserve.parallel_state import ParallelContext
from tiny_models import make_checkpoint, tiny_config

# id: (architecture, checkpoint overrides, flags, what the error says)
CASES = {
    "routed_experts_over_ep": ("mixtral", {}, dict(ep=3), "num_local_experts 8 is not a multiple of --ep 3"),
    "attention_heads_over_tp": ("mixtral", {}, dict(tp=3), "num_attention_heads 4 is not a multiple of --tp 3"),
    "kv_heads_over_tp": (
        "mixtral", dict(num_attention_heads=6, num_key_value_heads=2, head_dim=16), dict(tp=3),
        "num_key_value_heads 2 does not split over --tp 3"),
    "expert_intermediate_over_tp": (
        "mixtral", dict(intermediate_size=50), dict(tp=4), "intermediate_size 50 is not a multiple of --tp 4"),
    "shared_expert_over_tp": (
        "qwen2_moe", dict(shared_expert_intermediate_size=55), dict(tp=2),
        "shared_expert_intermediate_size 55 is not a multiple of --tp 2"),
    "shared_expert_over_tp_with_ep": (
        "qwen2_moe", dict(shared_expert_intermediate_size=55), dict(ep=2, tp=2),
        "shared_expert_intermediate_size 55 is not a multiple of --tp 2"),
    "dense_mlp_over_tp": (
        "qwen2_moe", dict(intermediate_size=81), dict(tp=2), "intermediate_size 81 is not a multiple of --tp 2"),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    return {
        name: str(make_checkpoint(arch, tmp_path_factory.mktemp(name), **overrides)[1])
        for name, (arch, overrides, _, _) in CASES.items()
    }


@pytest.fixture
def no_spawning(monkeypatch):
    """Fails the test if an executor is made or any process is started."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"started something before the layout was refused: {args[:2]}")

    monkeypatch.setattr(engine_core, "make_executor", refuse)
    monkeypatch.setattr(MultiprocExecutor, "_spawn", staticmethod(refuse))
    monkeypatch.setattr(subprocess, "Popen", refuse)


def _flags(flags: dict[str, int]) -> list[str]:
    return [arg for name, value in flags.items() for arg in (f"--{name}", str(value))]


@pytest.mark.parametrize("case", CASES)
def test_python_api_refuses_the_layout_before_spawning_a_rank(case, checkpoints, no_spawning):
    _, _, flags, message = CASES[case]
    with pytest.raises(ConfigError, match=re.escape(message)):
        LLM(model=checkpoints[case], **flags)  # no_spawning: a rank or executor started would raise instead


@pytest.mark.parametrize("case", CASES)
def test_serve_refuses_the_layout_before_starting_the_engine(case, checkpoints, no_spawning, capsys):
    _, _, flags, message = CASES[case]
    assert cli.main(["serve", "--model", checkpoints[case], *_flags(flags), "--port", "0"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("case", ["routed_experts_over_ep", "shared_expert_over_tp"])
def test_serve_command_exits_at_once_with_the_message(case, checkpoints):
    _, _, flags, message = CASES[case]
    argv = [sys.executable, "-m", "moeserve.cli", "serve", "--model", checkpoints[case], *_flags(flags), "--port", "0"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"moeserve serve: error: {message}" in proc.stderr
    assert "starting the engine process" not in proc.stderr  # refused by the flags' process, before the engine


def test_builtin_model_is_checked_without_building_it(no_spawning, monkeypatch):
    from moeserve.engine import builtin_model

    monkeypatch.setattr(builtin_model, "builtin_model_dir", lambda: pytest.fail("built the built-in model"))
    with pytest.raises(ConfigError, match="num_local_experts 16 is not a multiple of --ep 3"):
        check_startup(EngineConfig(parallel=ParallelConfig(ep=3)))
    check_startup(EngineConfig(parallel=ParallelConfig(ep=16, tp=4)))


def test_a_directory_without_config_json_is_named_and_a_broken_one_too(tmp_path):
    with pytest.raises(ConfigError, match="has no config.json"):  # engine/model_source.py: one line at start-up
        check_startup(EngineConfig(model=ModelConfig(model=str(tmp_path)), parallel=ParallelConfig(ep=3)))
    (tmp_path / "config.json").write_text("{not json")
    # left to the loader, it was transformers' traceback from the engine process and exit 1 after start-up
    with pytest.raises(ConfigError, match=r"config\.json is not valid JSON: .* at line 1, column 2"):
        check_startup(EngineConfig(model=ModelConfig(model=str(tmp_path)), parallel=ParallelConfig(ep=3)))


def test_every_problem_is_named_at_once(checkpoints):
    model = ModelConfig(model=checkpoints["attention_heads_over_tp"])
    with pytest.raises(ConfigError) as e:
        check_startup(EngineConfig(model=model, parallel=ParallelConfig(tp=5)))
    for field in ("num_attention_heads 4", "num_key_value_heads 2", "intermediate_size 48"):
        assert f"{field} " in str(e.value)


def test_deepseek_names_the_fields_of_its_shared_experts():
    from transformers import DeepseekV3Config

    from test_deepseek_model import COMMON, CONFIGS

    cfg = DeepseekV3Config(**(COMMON | CONFIGS["v3"][1] | dict(n_shared_experts=3, moe_intermediate_size=10)))
    cfg.architectures = ["DeepseekV3ForCausalLM"]
    message = "n_shared_experts 3 x moe_intermediate_size 10 = 30 is not a multiple of --tp 4"
    with pytest.raises(ConfigError, match=message):
        check_layout(cfg, tp=4, ep=4)


# --- the rule against the layers -----------------------------------------------------------------
# sizes chosen so that each rule alone refuses some layout of the grid below
ODD_SIZES = {
    "mixtral": dict(hidden_size=96, num_attention_heads=12, num_key_value_heads=2, head_dim=8, num_local_experts=6,
                    intermediate_size=20),
    "qwen2_moe": dict(hidden_size=96, num_attention_heads=12, num_key_value_heads=4, num_experts=6,
                      moe_intermediate_size=24, shared_expert_intermediate_size=30, intermediate_size=40),
    "qwen3_moe": dict(hidden_size=96, num_attention_heads=12, num_key_value_heads=3, head_dim=8, num_experts=12,
                      moe_intermediate_size=20, intermediate_size=36, mlp_only_layers=[1]),
    "olmoe": dict(hidden_size=96, num_attention_heads=12, num_key_value_heads=1, num_experts=6, intermediate_size=30),
    "gpt_oss": dict(hidden_size=96, num_attention_heads=12, num_key_value_heads=3, head_dim=8, num_local_experts=6,
                    intermediate_size=20),
    "glm4_moe": dict(hidden_size=96, num_attention_heads=12, num_key_value_heads=4, head_dim=8, n_routed_experts=6,
                     moe_intermediate_size=20, n_shared_experts=3, intermediate_size=36),
    "minimax_m2": dict(hidden_size=96, num_attention_heads=12, num_key_value_heads=2, head_dim=8, num_local_experts=12,
                       intermediate_size=30, rotary_dim=4),
}
GRID = [(tp, ep) for tp in (1, 2, 3, 4, 5, 6, 8) for ep in (1, 2, 3, 4, 6, 8, 12) if ep == 1 or ep % tp == 0]


def _configs() -> list:
    from transformers import DeepseekV2Config, DeepseekV3Config

    from test_deepseek_model import COMMON, CONFIGS

    configs = {arch: tiny_config(arch) for arch in ODD_SIZES}
    configs |= {f"{arch}-odd": tiny_config(arch, **sizes) for arch, sizes in ODD_SIZES.items()}
    odd = dict(hidden_size=36, num_attention_heads=6, n_routed_experts=12, moe_intermediate_size=10,
               n_shared_experts=3, intermediate_size=15)
    for name, cls in (("v2-groups", DeepseekV2Config), ("v3", DeepseekV3Config)):
        configs[name] = cls(**(COMMON | CONFIGS[name][1]))
        configs[f"{name}-odd"] = cls(**(COMMON | CONFIGS[name][1] | odd))
    for cfg in configs.values():
        cfg.architectures = [type(cfg).__name__.replace("Config", "ForCausalLM")]
    return [pytest.param(cfg, id=name) for name, cfg in configs.items()]


@pytest.mark.parametrize("hf_config", _configs())
def test_the_rule_accepts_exactly_the_layouts_the_layers_build(hf_config, tmp_path):
    hf_config.save_pretrained(tmp_path)
    fields = SimpleNamespace(**json.loads((tmp_path / "config.json").read_text()))
    cls = model_class(hf_config.architectures[0])
    verdicts = set()
    for tp, ep in GRID:
        try:
            model = cls(hf_config, ParallelContext(tp_size=tp, ep_size=ep), torch.float32)
            # experts that do not split over ep wait for a --placement plan's slots (MoELayer)
            built = all(moe.experts is not None for moe in model.moe_layers().values())
        except ValueError:
            built = False
        for cfg in (hf_config, fields):  # what a rank loads, and what the parent reads
            try:
                check_layout(cfg, tp, ep)
                accepted = True
            except ConfigError:
                accepted = False
            assert accepted == built, f"tp={tp} ep={ep} {'hf config' if cfg is hf_config else 'config.json'}"
        verdicts.add(built)
    assert verdicts == {True, False}  # the grid tells the layouts apart


def test_a_rank_applies_the_same_rule_to_the_config_it_loads(checkpoints):
    """Ranks get their configuration unvalidated (a torchrun world, code building a ModelRunner)."""
    from moeserve.engine.model_runner import ModelRunner

    config = EngineConfig(model=ModelConfig(model=checkpoints["shared_expert_over_tp"]))
    with pytest.raises(ConfigError, match=re.escape(CASES["shared_expert_over_tp"][3])):
        ModelRunner(config, ParallelContext(tp_size=2))


def _plan(path, experts: int, slots_row: list[int], ranks: int, layers: int = 2) -> str:
    import numpy as np

    from moeserve.placement.plan import PlacementPlan

    PlacementPlan.from_phy2log(np.array([slots_row] * layers), experts, ranks).validate().save(str(path))
    return str(path)


def test_a_placement_plan_that_does_not_fit_is_refused_before_anything_starts(checkpoints, tmp_path, no_spawning):
    """A plan for 5 experts on a model with 8 (the plan's own checks
    pass) started, and the first request killed the engine; a missing plan file and a plan for other
    ranks failed inside the engine or every rank, with tracebacks."""
    model = checkpoints["routed_experts_over_ep"]  # mixtral, 8 experts, 2 layers
    fewer = _plan(tmp_path / "fewer.json", 5, [0, 1, 2, 3, 4, 0], 2)
    with pytest.raises(ConfigError, match=r"is for 5 experts; this model has num_local_experts 8"):
        LLM(model=model, ep=2, placement=fewer)
    other_ranks = _plan(tmp_path / "ranks.json", 8, list(range(8)), 4)
    with pytest.raises(ConfigError, match=r"places experts on 4 ranks; this layout has --ep 2"):
        LLM(model=model, ep=2, placement=other_ranks)
    more_layers = _plan(tmp_path / "layers.json", 8, list(range(8)), 2, layers=3)
    with pytest.raises(ConfigError, match=r"places 3 MoE layers; this model has 2"):
        LLM(model=model, ep=2, placement=more_layers)
    typed = json.loads(open(more_layers).read()) | {"num_experts": "8"}
    (tmp_path / "typed.json").write_text(json.dumps(typed))
    with pytest.raises(ConfigError, match=r"field .num_experts. must be a whole number"):
        LLM(model=model, ep=2, placement=str(tmp_path / "typed.json"))
    with pytest.raises(ConfigError, match=r"cannot read --placement .*missing\.json"):
        LLM(model=model, ep=2, placement=str(tmp_path / "missing.json"))
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"--placement .*broken\.json.*not valid JSON"):
        LLM(model=model, ep=2, placement=str(tmp_path / "broken.json"))


def test_a_plans_slots_split_over_ep_where_the_experts_do_not(checkpoints, tmp_path):
    """8 experts do not split over --ep 3; a plan with one replica makes 9 slots, which do."""
    model = checkpoints["routed_experts_over_ep"]
    with pytest.raises(ConfigError, match="num_local_experts 8 is not a multiple of --ep 3"):
        check_startup(EngineConfig(model=ModelConfig(model=model), parallel=ParallelConfig(ep=3)))
    plan = _plan(tmp_path / "nine.json", 8, list(range(8)) + [0], 3)
    check_startup(EngineConfig(model=ModelConfig(model=model), parallel=ParallelConfig(ep=3), placement=plan))


def test_a_context_longer_than_the_checkpoints_positions_is_refused_unless_allowed(monkeypatch, no_spawning):
    from moeserve.engine.layout_check import ALLOW_LONG_ENV, trained_context

    monkeypatch.delenv(ALLOW_LONG_ENV, raising=False)
    long = EngineConfig(model=ModelConfig(max_model_len=100000))  # the built-in model covers 4096
    with pytest.raises(ConfigError, match="--max-model-len 100000 is longer than the 4096 positions"):
        check_startup(long)
    check_startup(EngineConfig(model=ModelConfig(max_model_len=4096)))
    monkeypatch.setenv(ALLOW_LONG_ENV, "1")
    check_startup(long)  # the user says the model handles it: a warning
    fields = SimpleNamespace
    assert trained_context(fields(max_position_embeddings=40960, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})) == 131072
    assert trained_context(fields(max_position_embeddings=163840, rope_scaling={  # DeepSeek-V3 counts it already
        "type": "yarn", "factor": 40, "original_max_position_embeddings": 4096})) == 163840
    assert trained_context(fields(max_position_embeddings=2048, rope_parameters={"rope_type": "linear", "factor": 2})) == 4096
    assert trained_context(fields(max_position_embeddings=2048, rope_parameters={"rope_type": "default"})) == 2048
    assert trained_context(fields()) is None
