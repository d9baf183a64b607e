"""futex.py on a shared mapping: a waiter sleeps while the word holds its value and a wake (or a
change before the wait) ends the sleep; the one-sided wait relies on it only for latency, never for
correctness (it re-polls at least every CHECK_S)."""
from __future__ import annotations

import ctypes
import mmap
import threading
import time

import pytest

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
