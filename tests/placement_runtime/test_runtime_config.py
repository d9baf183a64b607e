"""The placement runtime's config and plan fields travel intact (JSON to rank processes, msgpack per step)."""
from __future__ import annotations

import pytest

from moeserve.config import ConfigError, EngineConfig, config_from_dict, config_to_dict
from moeserve.core.step_plan import GroupBatch, StepPlan
from moeserve.engine.plan_codec import decode_plan, encode_plan
from moeserve.config import PlacementRuntimeConfig


def test_config_round_trips_and_old_dicts_still_load():
    runtime = PlacementRuntimeConfig(record_trace_dir="/tmp/rec", record_window_steps=7, eplb_interval=4, eplb_window=9)
    config = EngineConfig(placement_runtime=runtime)
    assert config_from_dict(config_to_dict(config)) == config
    old = config_to_dict(EngineConfig())
    del old["placement_runtime"]
    assert config_from_dict(old).placement_runtime == PlacementRuntimeConfig()
    assert runtime.window == 9 and PlacementRuntimeConfig(eplb_interval=4).window == 4


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(record_window_steps=0), "--record-window-steps must be >= 1"),
        (dict(eplb_interval=-1), "must be >= 0"),
        (dict(eplb_window=8), "--eplb-window needs --eplb-interval"),
        (dict(eplb_interval=2, eplb_num_groups=0), "--eplb-num-groups"),
    ],
)
def test_bad_values_say_what_to_change(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        EngineConfig(placement_runtime=PlacementRuntimeConfig(**kwargs)).validate()


def test_plan_fields_survive_the_codec():
    plan = StepPlan(step=3, groups=[GroupBatch(0), GroupBatch(1)], rebalance={"phy2log": [[1, 0, 2], [2, 1, 0]]},
                    collect_routing=True)
    back = decode_plan(encode_plan(plan))
    assert back.rebalance == plan.rebalance and back.collect_routing
    plain = decode_plan(encode_plan(StepPlan(step=4, groups=[GroupBatch(0)])))
    assert plain.rebalance is None and not plain.collect_routing
