"""Loaded by the rank processes of test_rank_failure.py (their PYTHONPATH starts here): the rank
named by MOESERVE_TEST_RAISE_AT="rank:step" raises in that step, before the step's collectives;
"rank:start" makes it exit at once, before it has imported torch or joined the world; "rank:joined"
makes it exit once it has joined the rendezvous, as it would build its process groups."""
import os
import time

from moeserve import envs

_spec = envs.TEST_RAISE_AT.get()
_rank, _, _point = _spec.partition(":")
_mine = bool(_spec) and os.environ.get("RANK") == _rank
if _mine and _point == "start":
    os._exit(3)
elif _mine and _point == "joined":
    import torch.distributed as _dist

    def _exiting_init(*args, **kwargs):
        time.sleep(1.0)  # rank 0 has seen every rank join and is inside its own init_process_group
        os._exit(3)

    _dist.init_process_group = _exiting_init
elif _mine:
    import moeserve.engine.worker as _worker

    _step = int(_point)
    _launch = _worker.Worker.launch  # execute() launches too

    def _raising_launch(self, plan):
        if plan.step == _step:
            raise RuntimeError(f"injected failure at step {_step}")
        return _launch(self, plan)

    _worker.Worker.launch = _raising_launch
