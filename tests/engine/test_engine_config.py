import re

import pytest

from moeserve.config import ConfigError, EngineConfig, ParallelConfig, config_from_dict, config_to_dict
from moeserve.engine.startup_checks import check_startup


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


LAUNCH_CASES = {  # id: (environment, parallel flags, what the one-line error says)
    "nodes_without_a_launcher": ({}, dict(ep=2, nodes=2), "--nodes 2 needs a launcher .* drop --nodes"),
    "launcher_world_too_small": ({"RANK": "0", "WORLD_SIZE": "4"}, dict(ep=8, tp=2),
                                 "the launcher started 4 ranks but --ep 8 --tp 2 needs 8"),
    "nccl_without_gpus": ({}, dict(ep=2, backend="nccl"), "--backend nccl needs CUDA GPUs"),
}


@pytest.mark.parametrize("case", LAUNCH_CASES)
def test_what_the_launch_cannot_give_is_refused_before_anything_starts(monkeypatch, capsys, case):
    """Each of these used to fail inside the engine or on every rank, with tracebacks."""
    import torch

    from moeserve import cli

    env, flags, message = LAUNCH_CASES[case]
    if case == "nccl_without_gpus" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    parallel = ParallelConfig(**flags)
    parallel.validate()  # a valid mesh: only the launch is wrong
    with pytest.raises(ConfigError, match=message):
        check_startup(EngineConfig(parallel=parallel))
    argv = ["serve", "--port", "0", *[a for k, v in flags.items() for a in (f"--{k}", str(v))]]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("configured,share,intra,env,expected", [
    (3, 8, 1, None, 3),  # --expert-threads wins
    (None, 8, 1, "5", 5),  # then MOESERVE_EXPERT_THREADS
    (None, 8, 2, None, 4),  # else the rank's cores over its OpenMP threads
    (None, 1, 1, None, 1),
    (None, 2, 4, None, 1),  # never below one
])
def test_expert_threads_default(monkeypatch, configured, share, intra, env, expected):
    from moeserve.kernels.cpu.threads import expert_threads

    if env is None:
        monkeypatch.delenv("MOESERVE_EXPERT_THREADS", raising=False)
    else:
        monkeypatch.setenv("MOESERVE_EXPERT_THREADS", env)
    assert expert_threads(share, intra, configured) == expected


def test_expert_threads_must_be_positive():
    with pytest.raises(ConfigError, match="--expert-threads must be >= 1"):
        ParallelConfig(expert_threads=0).validate()
