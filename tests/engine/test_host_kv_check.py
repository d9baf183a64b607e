"""Ranks of one host are started only when their KV caches fit the host's memory together."""
import pytest

from moeserve.engine.host_memory import check_host_kv


def test_the_sum_of_the_ranks_caches_is_checked(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   1048576 kB\n")  # 1 GiB
    check_host_kv(512, 2, str(meminfo))  # 2 x 512 MiB: exactly fits
    with pytest.raises(MemoryError, match=r"2 ranks on this host .* 600 MiB each .*--kv-cache-memory-mb"):
        check_host_kv(600, 2, str(meminfo))  # each alone fits, both do not
    check_host_kv(600, 2, str(tmp_path / "absent"))  # a host that does not say is not refused


def test_an_engine_refuses_to_start_ranks_whose_caches_do_not_fit_together(monkeypatch):
    from moeserve import LLM

    monkeypatch.setattr("moeserve.engine.host_memory.host_memory_available", lambda meminfo=None: 2**30)
    spawned = []
    monkeypatch.setattr("moeserve.engine.multiproc_executor.MultiprocExecutor._spawn",
                        staticmethod(lambda *a: spawned.append(a)))
    with pytest.raises(MemoryError, match=r"2 ranks on this host"):
        LLM(ep=2, kv_cache_memory_mb=600)  # 600 MiB fits the 1 GiB left; two of them do not
    assert not spawned  # refused before any rank started
