"""RoutingRecorder: counts equal a bincount of what it was handed, windows close every N steps."""
from __future__ import annotations

import numpy as np
import pytest

from moeserve.placement.recorder import RoutingRecorder
from moeserve.placement.importers import load_trace


def test_windows_counts_and_files(tmp_path):
    rng = np.random.default_rng(0)
    rec = RoutingRecorder(num_layers=2, num_experts=8, out_dir=str(tmp_path), steps_per_window=3, sample_tokens=5,
                          meta={"model": "tiny", "top_k": 2})
    rec.record(0, np.array([[1, 2]]))  # before start(): ignored
    rec.start()
    expected = np.zeros((3, 2, 8))
    for step in range(7):
        for layer in range(2):
            ids = rng.integers(-1, 8, (4, 2))
            rec.record(layer, ids, src_rank=step % 2)
            ok = ids[ids >= 0]
            expected[step // 3, layer] += np.bincount(ok, minlength=8)
        rec.step()
    rec.stop()  # closes the partial third window (one step)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"window_00000{i}.npz" for i in range(3)]
    np.testing.assert_array_equal(load_trace(str(tmp_path / "window_000001.npz")).counts[0], expected[1])
    trace = load_trace(rec.dump())
    np.testing.assert_array_equal(trace.counts, expected)
    assert trace.meta["model"] == "tiny" and trace.meta["steps_per_window"] == 3
    assert len(trace.tokens.layer) == 15  # 5 sampled records per window
    assert set(trace.tokens.rank[:5].tolist()) == {0}
    rec.record(0, np.array([[1, 2]]))  # after stop(): ignored
    assert len(rec.windows()) == 3


def test_accepts_torch_tensors_and_bounds_memory():
    import torch

    rec = RoutingRecorder(1, 4, steps_per_window=1, max_windows=2)
    rec.start()
    for _ in range(5):
        rec.record(0, torch.tensor([[0, 3], [3, -1]]))
        rec.step()
    windows = rec.windows()
    assert len(windows) == 2 and windows[-1].meta["window_index"] == 4
    np.testing.assert_array_equal(windows[0].counts[0, 0], [1, 0, 0, 2])
    with pytest.raises(RuntimeError, match="out_dir"):
        rec.dump()


def test_a_window_that_cannot_be_written_is_kept_and_recording_goes_on(tmp_path, caplog):
    blocked = tmp_path / "not_a_dir"
    blocked.write_text("a file where the trace directory should be")
    rec = RoutingRecorder(1, 4, out_dir=str(blocked), steps_per_window=1)
    rec.start()
    with caplog.at_level("WARNING"):
        for _ in range(3):
            rec.record(0, np.array([[0, 1]]))
            rec.step()  # closes a window each step: the write fails, the step does not
    assert rec.write_errors == 3 and len(rec.windows()) == 3
    assert "not written" in caplog.text
    path = rec.dump(str(tmp_path / "all.npz"))  # what was kept in memory is still there
    np.testing.assert_array_equal(load_trace(path).counts[:, 0].sum(0), [3, 3, 0, 0])
