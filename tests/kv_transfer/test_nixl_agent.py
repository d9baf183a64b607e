"""One-sided NIXL reads of named KV blocks between two processes on loopback (UCX over shared memory
and tcp on lo), through the side channel's handshake; and how a read fails when the owner is gone."""
from __future__ import annotations

import collections
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

if not any(__import__("importlib.util").util.find_spec(m) for m in ("nixl_cu12", "nixl")):
    pytest.skip("NIXL is not installed (pip install 'moeserve[pd]')", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
PEER = [sys.executable, str(Path(__file__).with_name("nixl_peer.py"))]
ENV = dict(os.environ, PYTHONPATH=str(REPO), UCX_NET_DEVICES="lo", OMP_NUM_THREADS="1")


ANSWER_TIMEOUT_S = 60.0  # a peer starts in about 2 s; a pull's own timeouts add up to 30 s at most


def _start(*args: str) -> subprocess.Popen:
    """A peer, its stdout read line by line by a thread into `proc.lines` (None at its end) and its
    stderr kept in a file, for the message of a peer that does not answer.

    Not select() on proc.stdout: readline pulls whatever the pipe holds into the file object's buffer,
    so when NIXL's log lines and the JSON line arrived together (a busy test process reading late),
    readline returned a log line, the JSON line sat in the buffer, and select() on the empty pipe
    waited out its whole timeout (the owner that "did not answer in time" in CI, exit status 0)."""
    stderr = tempfile.TemporaryFile()
    proc = subprocess.Popen([*PEER, *args], env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=stderr, text=True)
    proc.stderr_file = stderr
    proc.lines = queue.SimpleQueue()
    proc.log = collections.deque(maxlen=20)  # its last non-JSON stdout lines (NIXL's log)
    threading.Thread(target=_read_lines, args=(proc,), name=f"peer-{proc.pid}-stdout", daemon=True).start()
    return proc


def _read_lines(proc: subprocess.Popen) -> None:
    for line in proc.stdout:
        proc.lines.put(line)
    proc.lines.put(None)


def _answer(proc: subprocess.Popen, timeout_s: float = ANSWER_TIMEOUT_S) -> dict:
    """The next JSON line of `proc` (NIXL logs to stdout too: its lines are skipped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            line = proc.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"the peer did not answer in {timeout_s:.0f} s\n{_diagnose(proc)}") from None
        if line is None:
            proc.wait(10)
            raise AssertionError(f"the peer exited\n{_diagnose(proc)}")
        if line.startswith("{"):
            return json.loads(line)
        proc.log.append(line)


def _diagnose(proc: subprocess.Popen) -> str:
    """The peer's exit status, last log lines, stderr tail and (while it lives, where py-spy is
    installed) its threads' stacks."""
    parts = [f"peer {proc.args[2:]} pid {proc.pid}, exit status {proc.poll()}",
             "stdout (last lines):\n" + "".join(proc.log)]
    proc.stderr_file.flush()
    proc.stderr_file.seek(0)
    parts.append("stderr (tail):\n" + proc.stderr_file.read()[-4000:].decode(errors="replace"))
    spy = shutil.which("py-spy")
    if proc.poll() is None and spy:
        try:
            dump = subprocess.run([spy, "dump", "--pid", str(proc.pid)], capture_output=True, text=True, timeout=30)
            parts.append("py-spy dump:\n" + dump.stdout + dump.stderr)
        except subprocess.TimeoutExpired:
            parts.append("py-spy dump: timed out")
    return "\n".join(parts)


def _pull(reader, port: int, remote: list[int], local: list[int], engine_id: str = "engine-1", rid: str = "r") -> dict:
    pull = dict(request_id=rid, group=0, engine_id=engine_id, remote_request_id=rid, host="127.0.0.1", port=port,
                remote_block_ids=remote, local_block_ids=local)
    reader.stdin.write(json.dumps(pull) + "\n")
    reader.stdin.flush()
    return _answer(reader)


def _stop(*procs: subprocess.Popen) -> None:
    """Close each peer's stdin (its signal to clean up and exit), killing any that outlive 20 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.stdin.close()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr_file.close()


@pytest.fixture
def pair():
    owner = _start("owner", "engine-1")
    reader = _start("reader")
    try:
        yield owner, reader, _answer(owner)["port"]
    finally:
        _stop(owner, reader)


@pytest.mark.timeout(700)
def test_reads_named_blocks_into_named_blocks_then_fails_cleanly_when_the_owner_dies(pair):
    owner, reader, port = pair
    tensors = 2 * 2  # layers x (K, V)
    out = _pull(reader, port, [7, 2, 11], [0, 5, 1])
    assert out["error"] is None
    assert out["blocks"] == [[100 * t + b for t in range(tensors)] for b in (7, 2, 11)]
    assert out["bytes"] == 3 * tensors * 4 * 2 * 8 * 4  # blocks x tensors x (block_size, heads, dim) x fp32
    again = _pull(reader, port, [3], [2])  # the handshake is cached: a second read names the same peer
    assert again["error"] is None and again["blocks"] == [[100 * t + 3 for t in range(tensors)]]
    wrong = _pull(reader, port, [3], [2], engine_id="engine-restarted")
    assert "restarted" in wrong["error"]
    assert _pull(reader, port, [4], [3])["error"] is None  # a fresh handshake after the refusal
    owner.kill()  # mid-life, with the handshake cached: the next read goes straight to a dead peer
    owner.wait(30)
    gone = _pull(reader, port, [5], [4])
    assert gone["error"] and gone["blocks"] != [[100 * t + 5 for t in range(tensors)]]
    after = _pull(reader, port, [5], [4])  # the failure dropped the peer: this one shakes hands again
    assert "did not answer" in after["error"]
    assert reader.poll() is None  # the reader lives on


@pytest.mark.timeout(600)
def test_out_of_range_blocks_are_refused_before_any_read(pair):
    _, reader, port = pair
    out = _pull(reader, port, [99], [0])
    assert "out of range" in out["error"]


@pytest.mark.timeout(600)
def test_a_read_of_blocks_no_longer_pinned_is_not_used(pair):
    """The pin expired (say) while the request waited: whatever the read got may be someone else's KV."""
    owner, reader, port = pair
    assert _pull(reader, port, [1], [1])["error"] is None
    owner.stdin.write("unpin\n")
    owner.stdin.flush()
    assert _answer(owner)["unpinned"]
    out = _pull(reader, port, [1], [1])
    assert "no longer holds the blocks" in out["error"]


@pytest.mark.timeout(700)
@pytest.mark.parametrize("owner_tp, reader_rank, reader_tp", [(2, 0, 1), (1, 1, 2)])
def test_each_reader_rank_gets_exactly_its_heads_from_the_owner_ranks_that_hold_them(owner_tp, reader_rank, reader_tp):
    """tp2 -> tp1: one reader rank gathers head 0 from owner rank 0 and head 1 from owner rank 1;
    tp1 -> tp2: reader rank 1 keeps only head 1 of the owner's blocks (staged, then sliced)."""
    owner = _start("owner", "engine-1", str(owner_tp))
    reader = _start("reader", str(reader_rank), str(reader_tp))
    try:
        port = _answer(owner)["port"]
        out = _pull(reader, port, [7, 2, 8], [0, 5, 1])
        assert out["error"] is None
        heads = range(reader_rank * 2 // reader_tp, (reader_rank + 1) * 2 // reader_tp)
        tensors = 2 * 2
        assert out["heads"] == [[[round(100 * t + b + h / 10, 3) for h in heads] for t in range(tensors)]
                                for b in (7, 2, 8)]
        # the owner ranks' whole blocks cross (staged when the head ranges differ): every head once
        assert out["bytes"] == 3 * tensors * 4 * 2 * 8 * 4  # blocks x tensors x (slots, 2 heads, dim) x fp32
    finally:
        _stop(owner, reader)


def test_an_idle_agent_does_not_keep_a_core_busy():
    """NIXL's wrapper leaves the UCX progress thread polling without a pause (a whole core per rank,
    idle); KvAgent gives it a delay, so it waits on the worker's events instead."""
    import time

    import torch

    from moeserve.kv_transfer.nixl_agent import KvAgent

    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    agent = KvAgent([torch.zeros(4, 16, 8)], block_size=16)
    try:
        time.sleep(0.2)  # the progress thread is up
        started = time.process_time()
        time.sleep(1.0)
        assert time.process_time() - started < 0.3  # a polling thread alone takes about 1 s of CPU here
    finally:
        agent.close()
