"""futex.py on a shared mapping: a waiter sleeps while the word holds its value and a wake (or a
change before the wait) ends the sleep; the one-sided wait relies on it only for latency, never for
correctness (it re-polls at least every CHECK_S)."""
from __future__ import annotations

import ctypes
import mmap
import threading
import time

import pytest
import torch

from moeserve.dispatch import futex

pytestmark = pytest.mark.skipif(not futex.available(), reason="futexes need Linux x86-64")


def _word() -> tuple[mmap.mmap, ctypes.c_int64, int]:
    mm = mmap.mmap(-1, 4096)  # MAP_SHARED: the futex is keyed by the page, as between ranks
    word = ctypes.c_int64.from_buffer(mm)
    return mm, word, ctypes.addressof(word)


def test_wait_returns_at_once_when_the_word_already_differs() -> None:
    mm, word, address = _word()
    word.value = 7
    started = time.monotonic()
    futex.wait(address, 6, timeout_s=5.0)
    assert time.monotonic() - started < 1.0
    del word
    mm.close()


def test_wait_times_out_without_a_wake() -> None:
    mm, word, address = _word()
    started = time.monotonic()
    futex.wait(address, 0, timeout_s=0.05)
    assert 0.04 <= time.monotonic() - started < 2.0
    del word
    mm.close()


def test_a_store_then_wake_ends_the_sleep() -> None:
    mm, word, address = _word()
    woke: list[float] = []

    def waiter() -> None:
        while word.value == 0:  # a wake may come before the sleep starts: the value check covers it
            futex.wait(address, 0, timeout_s=10.0)
        woke.append(time.monotonic())

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.05)
    word.value = (1 << 32) + 3  # the low 32 bits change, as an epoch flag's do
    stored = time.monotonic()
    futex.wake(address)
    thread.join(timeout=10)
    assert woke and woke[0] - stored < 2.0  # woken, not timed out after 10 s


def _heaps(world: int = 2, nbytes: int = 4096):
    from moeserve.dispatch.shm_heap import ShmHeap

    mm = mmap.mmap(-1, world * ShmHeap.region_bytes(nbytes))  # one shared mapping, as the ranks map it
    return [ShmHeap(mm, r, world, nbytes, "test") for r in range(world)]


def test_notify_makes_no_system_call_unless_the_peer_sleeps(monkeypatch) -> None:
    writer, reader = _heaps()
    calls = []
    monkeypatch.setattr(futex, "wake", lambda address: calls.append(address))
    writer.store_word(1, 0, 5)
    writer.notify(1, 0, 1, 5)
    assert calls == []  # rank 1 is not asleep: a wake-up system call would be wasted
    woke = threading.Event()
    monkeypatch.undo()

    def sleeper() -> None:
        while reader.load_words(0, 1)[0] != 6:
            reader.sleep_on(0, 1, 6, timeout_s=10.0)
        woke.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    time.sleep(0.05)
    writer.store_word(1, 0, 6)
    writer.notify(1, 0, 1, 6)
    assert woke.wait(2.0)  # woken by the notify, not by the 10 s timeout
    thread.join(timeout=10)


def test_a_sleeper_on_a_row_is_woken_once_by_the_last_flag(monkeypatch) -> None:
    writer, reader = _heaps()
    calls = []
    real_wake = futex.wake
    monkeypatch.setattr(futex, "wake", lambda address: (calls.append(address), real_wake(address)))
    woke = threading.Event()

    def sleeper() -> None:
        while reader.load_words(0, 3) != [4, 4, 4]:
            reader.sleep_on(0, 3, 4, timeout_s=10.0)
        woke.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    for source in range(3):
        time.sleep(0.05)
        assert not woke.is_set()
        writer.store_word(1, 8 * source, 4)
        writer.notify(1, 0, 3, 4)
    assert woke.wait(2.0)  # woken by the last notify, not by the 10 s timeout
    thread.join(timeout=10)
    assert len(calls) == 1  # the first two flags left the row incomplete: no system call for them
    assert reader.load_words(24, 1) == [4]  # the bell holds the row's value


@pytest.mark.parametrize("writer_side", ["notify", "native"])
def test_no_wake_up_is_lost_between_the_flag_check_and_the_sleep(writer_side: str) -> None:
    writer, reader = _heaps()
    if writer_side == "native":  # the C++ signal (csrc/onesided.cpp), as the shm backend calls it
        ops, words, none = _native_ops(), writer.native_words(), torch.zeros(0, dtype=torch.int64)

        def signal(epoch: int) -> None:
            ops.signal(*words, 0, 2, 0, none, 0, 0, epoch)
    else:

        def signal(epoch: int) -> None:
            writer.store_word(1, 0, epoch)
            writer.notify(1, 0, 2, epoch)
    slow: list[float] = []

    def sleeper() -> None:
        for epoch in range(1, 301):
            reader.store_word(1, 8, epoch)  # its own flag, then sleep until the writer's lands
            started = time.monotonic()
            while reader.load_words(0, 2) != [epoch, epoch]:
                reader.sleep_on(0, 2, epoch, timeout_s=3.0)
            if time.monotonic() - started > 1.5:
                slow.append(epoch)
            writer.store_word(0, 64, epoch)  # ack on rank 0's word 8

    thread = threading.Thread(target=sleeper)
    thread.start()
    for epoch in range(1, 301):
        signal(epoch)
        while writer.load_words(64, 1)[0] != epoch:
            time.sleep(0)
    thread.join(timeout=60)
    assert not thread.is_alive() and slow == []  # a lost wake-up waits out the 3 s timeout


# the C++ signal and poll (csrc/onesided.cpp) that the shm backend uses in place of the Python loops
# above where its kernels are built: the same words, the same single wake-up


def _native_ops():
    from moeserve.dispatch import native

    if not native.load():
        pytest.skip("the C++ dispatch kernels are not built here")
    return torch.ops.moeserve_dispatch


def test_native_signal_writes_every_peers_meta_words_then_its_flag() -> None:
    ops = _native_ops()
    heaps = _heaps(world=3)
    counts = torch.tensor([5, 0, 7], dtype=torch.int64)
    ops.signal(*heaps[1].native_words(), 1, 3, 256, counts, 1, 64, 9)  # rank 1: meta at byte 256, row at 64
    for d, heap in enumerate(heaps):
        assert heap.load_words(256, 2) == [counts[d].item(), 1]
        assert heap.load_words(64, 4) == [0, 9, 0, 0]  # its flag only; the bell untouched (nobody sleeps)
    ops.signal(*heaps[0].native_words(), 0, 3, 0, torch.zeros(0, dtype=torch.int64), 0, 64, 9)  # no meta
    assert heaps[2].load_words(64, 3) == [9, 9, 0] and heaps[2].load_words(256, 2) == [7, 1]


def test_native_signal_wakes_a_sleeper_once_its_row_is_complete() -> None:
    ops = _native_ops()
    writer, reader = _heaps()
    woke = threading.Event()

    def sleeper() -> None:
        while reader.load_words(0, 2) != [4, 4]:
            reader.sleep_on(0, 2, 4, timeout_s=10.0)
        woke.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    time.sleep(0.05)
    reader.store_word(1, 8, 4)  # the sleeper's own flag (a rank signals itself too)
    reader.notify(1, 0, 2, 4)  # the row is not complete: no wake
    time.sleep(0.05)
    assert not woke.is_set()
    ops.signal(*writer.native_words(), 0, 2, 0, torch.zeros(0, dtype=torch.int64), 0, 0, 4)
    assert woke.wait(2.0)  # woken by the C++ signal, not by the 10 s timeout
    thread.join(timeout=10)
    assert reader.load_words(16, 1) == [4]  # the bell holds the row's value


def test_native_poll_returns_when_the_row_is_up_and_gives_up_after_its_time() -> None:
    ops = _native_ops()
    _, reader = _heaps()
    base, stride, header, _ = reader.native_words()
    row = base + stride + header  # rank 1's row of 2 flags at byte 0
    started = time.monotonic()
    assert ops.poll(row, 2, 3, 5e-5, 0.02) is False
    assert 0.02 <= time.monotonic() - started < 2.0
    setter = threading.Timer(0.01, lambda: (reader.store_word(1, 0, 3), reader.store_word(1, 8, 3)))
    setter.start()
    assert ops.poll(row, 2, 3, 5e-5, 10.0) is True  # the op releases the GIL: the setter runs
    setter.join()
