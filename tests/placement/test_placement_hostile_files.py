"""Crafted trace and plan files (hostile_files.py): each is refused with exit 2 (or a ConfigError at
`serve` start-up) and one line naming the file and the field, without a traceback and without
allocating anything the file's size does not justify. Valid files still load as before."""
from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hostile_files import PLAN_CASES, TRACE_CASES, npz, npy_of, raw_zip, tokens

from moeserve.cli import main
from moeserve.engine.layout_check import load_plan
from moeserve.errors import ConfigError
from moeserve.placement import file_limits, importers
from moeserve.placement.evaluate import units_per_token
from moeserve.placement.importers import load_trace
from moeserve.placement.plan import PlacementPlan, PlanError
from moeserve.placement.trace import TokenSample, TraceFormatError

REPO = Path(__file__).resolve().parents[2]
PEAK_BYTES = 32 << 20  # traced allocations while refusing one crafted file


def _refused(capsys, argv: list[str], path: str, needle: str, command: str) -> str:
    """Run the CLI; it exits 2 with one stderr line naming `path` and `needle`, nothing on stdout."""
    tracemalloc.start()
    try:
        rc = main(argv)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"moeserve {command}: error: "), err
    assert path in err and needle in err, err
    assert peak < PEAK_BYTES, f"{peak >> 20} MiB allocated to refuse {path}"
    return err


@pytest.mark.parametrize("name", sorted(TRACE_CASES))
def test_a_crafted_trace_is_refused_in_one_line(tmp_path, capsys, name):
    data, needle = TRACE_CASES[name]
    path = tmp_path / name
    path.write_bytes(data)
    _refused(capsys, ["trace", "show", str(path)], str(path), needle, "trace")


@pytest.mark.parametrize("name", ["jsonl_expert_id_1e9", "npz_counts_header_declares_8_tib", "sglang_deep"])
def test_place_and_convert_refuse_crafted_traces_too(tmp_path, capsys, name):
    data, needle = TRACE_CASES[name]
    path = str(tmp_path / name)
    Path(path).write_bytes(data)
    _refused(capsys, ["place", "--trace", path, "--ep", "2"], path, needle, "place")
    _refused(capsys, ["trace", "convert", path, "-o", str(tmp_path / "out.npz")], path, needle, "trace")
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("name", sorted(PLAN_CASES))
def test_a_crafted_plan_is_refused_by_place_and_at_serve_start_up(tmp_path, capsys, name):
    data, needle = PLAN_CASES[name]
    trace, path = tmp_path / "t.npz", str(tmp_path / f"{name}.json")
    trace.write_bytes(npz())
    Path(path).write_bytes(data)
    _refused(capsys, ["place", "--eval", path, "--trace", str(trace)], path, needle, "place")
    _refused(capsys, ["place", "--trace", str(trace), "--ep", "2", "--current", path], path, needle, "place")
    with pytest.raises(ConfigError) as info:  # what `moeserve serve --placement` and LLM(placement=) run first
        load_plan(path)
    message = str(info.value)
    assert message.startswith(f"--placement {path}: ") and needle in message and "\n" not in message


def test_unreadable_files_are_named(tmp_path, capsys):
    missing = str(tmp_path / "missing.npz")
    _refused(capsys, ["trace", "show", missing], missing, "cannot read trace", "trace")
    _refused(capsys, ["trace", "show", str(tmp_path)], str(tmp_path), "cannot read trace", "trace")
    trace = tmp_path / "t.npz"
    trace.write_bytes(npz())
    _refused(capsys, ["place", "--eval", missing, "--trace", str(trace)], missing, "cannot read placement plan", "place")


def test_bounds_apply_before_allocating(tmp_path, monkeypatch):
    """Each bound of file_limits.py, lowered so that small files cross it."""
    monkeypatch.setattr(file_limits, "MAX_CELLS", 1000)
    bomb = tmp_path / "bomb.npz"  # real, compressed data: 1600 counts, over the (lowered) bound
    buf = io.BytesIO()
    np.savez_compressed(buf, counts=np.zeros((10, 10, 16)), meta=np.array(json.dumps(
        {"format": "moeserve-trace", "version": 1, "num_experts": 16})))
    bomb.write_bytes(buf.getvalue())
    with pytest.raises(TraceFormatError, match=r"array 'counts' would be 10 x 10 x 16 = 1600 elements, over the bound of 1000"):
        load_trace(str(bomb))
    prompts = tmp_path / "prompts.jsonl"  # 70 prompts x 1 layer x 16 experts
    prompts.write_text("".join(json.dumps({"layer": 0, "experts": [15], "problem_id": i}) + "\n" for i in range(70)))
    with pytest.raises(TraceFormatError, match=r"counts \[prompts, layers, experts\] would be 70 x 1 x 16"):
        load_trace(str(prompts))
    replicas = tmp_path / "replicas.json"  # 600 slots, but log2phy [1 layer, 4 experts, 597 replicas of expert 0]
    replicas.write_text(json.dumps({"num_ranks": 1, "phy2log": [[0, 1, 2, 3] + [0] * 596]}))
    with pytest.raises(PlanError, match=r"log2phy .* would be 1 x 4 x 597 = 2388 elements"):
        PlacementPlan.load(str(replicas))
    monkeypatch.setattr(file_limits, "MAX_TEXT_BYTES", 100)
    with pytest.raises(TraceFormatError, match=r"prompts\.jsonl: is larger than 100 bytes"):
        load_trace(str(prompts))
    monkeypatch.setattr(importers, "MAX_TOKEN_RECORDS", 5)
    monkeypatch.setattr(file_limits, "MAX_TEXT_BYTES", 1 << 20)
    with pytest.raises(TraceFormatError, match=r"more than 5 token records"):
        load_trace(str(prompts))


def test_a_compressed_npz_member_is_read_only_as_far_as_its_header_says(tmp_path):
    """A member whose deflated data inflates past what its header declares is read only as far as
    the header says (the header bounded first); a member that inflates short of it is truncated."""
    meta = npy_of(np.array(json.dumps({"format": "moeserve-trace", "version": 1})))
    header_says_small = npy_of(np.ones((1, 2, 4))) + bytes(50 << 20)  # 50 MiB of zeros past the array
    path = tmp_path / "long.npz"
    path.write_bytes(raw_zip([("meta.npy", meta), ("counts.npy", header_says_small)]))
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    trace = load_trace(str(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert trace.counts.shape == (1, 2, 4) and peak < PEAK_BYTES


def test_a_54_byte_line_with_expert_1e9_stays_small_in_a_fresh_process(tmp_path):
    """Before: `trace show` allocated 7.45 GiB twice for it. Under a 1 GiB address-space limit, the CLI
    exits 2 with one line (a MemoryError or a traceback would fail this)."""
    path = tmp_path / "line.jsonl"
    path.write_bytes(TRACE_CASES["jsonl_expert_id_1e9"][0])
    assert path.stat().st_size == 54

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    env = dict(os.environ, PYTHONPATH=str(REPO), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", "import sys; from moeserve.cli import main; sys.exit(main())",
                           "trace", "show", str(path)], env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=limit)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and "field 'experts' is 1000000000" in done.stderr


@pytest.mark.parametrize("sample", sorted(p.name for p in (REPO / "traces").glob("*.npz")))
def test_the_sample_traces_load_exactly_as_stored(sample):
    path = REPO / "traces" / sample
    trace = load_trace(str(path))
    with np.load(path, allow_pickle=False) as z:
        np.testing.assert_array_equal(trace.counts, z["counts"])
        assert trace.meta == {"name": path.stem, **json.loads(str(z["meta"]))}
        if "token_topk" in z:
            for field, key in zip(("layer", "topk", "rank", "token_id"), ("token_layer", "token_topk", "token_rank", "token_id")):
                np.testing.assert_array_equal(getattr(trace.tokens, field), z[key])
        if "placement" in z:
            np.testing.assert_array_equal(trace.placement, z["placement"])


def test_token_ranks_the_plan_does_not_have_count_as_unknown():
    plan = PlacementPlan.contiguous(1, 4, 2)
    topk = np.array([[0, 3], [1, 2]], np.int32)
    sample = lambda rank: TokenSample(np.zeros(2, np.int32), topk, np.array(rank, np.int32), np.arange(2))  # noqa: E731
    assert units_per_token(plan, sample([7, 9])) == units_per_token(plan, sample([-1, -1]))


def test_place_and_trace_arguments_out_of_range_exit_2(tmp_path, capsys):
    trace = str(tmp_path / "t.npz")
    Path(trace).write_bytes(npz(meta={"format": "moeserve-trace", "version": 1, "num_experts": 8},
                                **tokens()))
    for argv, needle in [
        (["trace", "show", trace, "--top", "-1"], "--top"),
        (["trace", "convert", trace, "-o", str(tmp_path / "o.npz"), "--max-tokens", "0"], "--max-tokens"),
        (["place", "--trace", trace, "--ep", "2", "--groups", "0"], "--groups 0"),
        (["place", "--trace", trace, "--ep", "2", "--groups", "3"], "--groups 3"),
        (["place", "--trace", trace, "--ep", "2", "--redundant", str(10**9)], "more than 16384"),
        (["trace", "convert", trace, "-o", str(tmp_path / "no" / "dir.npz")], "-o/--output"),
    ]:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, err
    small = tmp_path / "small.json"
    PlacementPlan.contiguous(2, 4, 2).save(str(small))
    assert main(["place", "--trace", trace, "--ep", "2", "--current", str(small)]) == 2
    assert "--current plan is [layers=2, experts=4]" in capsys.readouterr().err


def test_configure_refuses_a_crafted_trace_in_one_line(tmp_path, capsys):
    path = str(tmp_path / "line.jsonl")
    Path(path).write_bytes(TRACE_CASES["jsonl_expert_id_1e9"][0])
    assert main(["configure", "--model", "mixtral-8x7b", "--hardware", "h100", "--phase", "decode", "--ep", "4",
                 "--batch", "64", "--trace", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and path in err and "'experts'" in err


def test_mutated_files_load_or_are_refused_in_one_line(tmp_path):
    """Byte-level mutations of every format (seeded): each loads, or raises the reader's error naming the file."""
    rng = np.random.default_rng(0)
    seeds = [p.read_bytes() for p in sorted((REPO / "traces").glob("*.npz"))]
    seeds += [TRACE_CASES["jsonl_expert_float"][0].replace(b"1.5", b"3"), json.dumps({"logical_count": [[1.0] * 8] * 3}).encode()]
    plan = PLAN_CASES["num_ranks_uneven"][0].replace(b'"num_ranks": 4', b'"num_ranks": 2')
    path = str(tmp_path / "f")
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(300):
        source = plan if i % 4 == 3 else seeds[i % len(seeds)]
        data = bytearray(source)
        for _ in range(int(rng.integers(1, 6))):
            at = int(rng.integers(len(data)))
            data[at:at + int(rng.integers(0, 3))] = rng.integers(0, 256, int(rng.integers(0, 3)), dtype=np.uint8).tobytes()
        Path(path).write_bytes(bytes(data))
        try:
            PlacementPlan.load(path) if source is plan else load_trace(path)
            outcomes["loaded"] += 1
        except (TraceFormatError, PlanError) as e:
            assert path in str(e) and "\n" not in str(e)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100
