import pytest

from moeserve.config import ConfigError, EngineConfig, ParallelConfig, config_from_dict, config_to_dict


@pytest.mark.parametrize(
    "tp,ep,nodes,message",
    [
        (4, 6, 1, "--ep 6 is not a multiple of --tp 4"),
        (4, 16, 8, "--tp 4 exceeds the 2 ranks per node"),
        (1, 6, 4, "6 ranks do not split evenly over --nodes 4"),
        (0, 1, 1, "must be >= 1"),
    ],
)
def test_mesh_errors_say_what_is_wrong(tp, ep, nodes, message):
    with pytest.raises(ConfigError, match=message):
        ParallelConfig(tp=tp, ep=ep, nodes=nodes).validate()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(dispatch="bogus"), "is not a backend"),
        (dict(dispatch="a2a"), "needs --ep > 1"),
        (dict(dispatch="agrs", tp=2), "needs --ep > 1"),
        (dict(dispatch="local", ep=2), "keeps every expert on one rank"),
        (dict(backend="mpi"), "--backend 'mpi' is not supported"),
        (dict(step_timeout_s=0), "positive number of seconds"),
        (dict(step_timeout_s=-5), "positive number of seconds"),
    ],
)
def test_flags_are_checked_before_any_rank_starts(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ParallelConfig(**kwargs).validate()


@pytest.mark.parametrize("tp,ep,world,groups", [(1, 1, 1, 1), (2, 1, 2, 1), (1, 4, 4, 4), (4, 16, 16, 4), (2, 2, 2, 1)])
def test_mesh_sizes(tp, ep, world, groups):
    p = ParallelConfig(tp=tp, ep=ep)
    p.validate()
    assert (p.world_size, p.num_attention_groups) == (world, groups)


def test_config_round_trips_through_plain_dict():
    config = EngineConfig(parallel=ParallelConfig(tp=2, ep=4), placement="plan.json", seed=3)
    assert config_from_dict(config_to_dict(config)) == config
