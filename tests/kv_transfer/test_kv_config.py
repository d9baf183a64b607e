"""--kv-role / --kv-transfer at start-up: one clear line for each mistake, NIXL's absence included."""
from __future__ import annotations

import importlib.util

import pytest

from moeserve.config import KvTransferConfig
from moeserve.errors import ConfigError
from moeserve.settings import engine_config


def test_roles_pick_their_transfer():
    assert not KvTransferConfig().enabled  # both: today's colocated server, no NIXL needed
    assert KvTransferConfig(role="prefill").enabled and KvTransferConfig(role="decode").enabled
    assert KvTransferConfig(role="both", transfer="nixl").enabled


@pytest.mark.parametrize("cfg, words", [
    (dict(kv_role="prefil"), "--kv-role 'prefil' is not one of both, prefill, decode"),
    (dict(kv_transfer="ucx"), "--kv-transfer 'ucx' is not one of auto, none, nixl"),
    (dict(kv_role="decode", kv_transfer="none"), "use --kv-transfer nixl"),
    (dict(kv_expiry_s=0.0), "--kv-expiry-s must be positive"),
    (dict(kv_side_channel_port=70000), "--kv-side-channel-port must be in"),
    (dict(kv_side_channel_host="0.0.0.0"), "would listen on every interface"),
    (dict(kv_side_channel_host="::"), "would listen on every interface"),
    (dict(kv_side_channel_host="::0"), "would listen on every interface"),
    (dict(kv_side_channel_host="0:0::0"), "would listen on every interface"),
    (dict(kv_secret=""), "--kv-secret must not be empty"),
    (dict(kv_max_pinned_blocks=-1), "--kv-max-pinned-blocks must be >= 0"),
])
def test_bad_settings_are_one_line(cfg, words):
    with pytest.raises(ConfigError, match=words):
        engine_config(cfg).validate()


def test_any_tp_and_ep_on_one_node_are_served():
    for layout in ({"tp": 2}, {"ep": 2}, {"ep": 4, "tp": 2}):
        engine_config({"kv_role": "prefill", **layout}).validate()
        engine_config({"kv_role": "decode", **layout}).validate()


def test_the_address_facing_the_pool_is_this_hosts_and_not_loopback_across_hosts(monkeypatch):
    from moeserve.engine.launch_check import check_kv_hosts

    monkeypatch.delenv("MOESERVE_KV_SECRET", raising=False)
    spanning = engine_config({"kv_role": "prefill", "ep": 2, "nodes": 2})
    spanning.validate()  # sides may span hosts
    with pytest.raises(ConfigError, match="--kv-side-channel-host 127.0.0.1 is loopback but the ranks span --nodes 2"):
        check_kv_hosts(spanning.kv_transfer, spanning.parallel)
    elsewhere = engine_config({"kv_role": "decode", "kv_side_channel_host": "192.0.2.77"})
    with pytest.raises(ConfigError, match="192.0.2.77 .*is not an address of any interface of this host"):
        check_kv_hosts(elsewhere.kv_transfer, elsewhere.parallel)
    check_kv_hosts(engine_config({"kv_role": "decode"}).kv_transfer, spanning.parallel.__class__())
    check_kv_hosts(engine_config({"ep": 2, "nodes": 2}).kv_transfer, spanning.parallel)  # no KV transfer, no check


def test_an_address_facing_other_hosts_needs_the_pools_secret_given(monkeypatch):
    import psutil

    from moeserve.engine.launch_check import check_kv_hosts

    monkeypatch.delenv("MOESERVE_KV_SECRET", raising=False)
    outward = next((a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                    if a.family.name == "AF_INET" and not a.address.startswith("127.")), None)
    if outward is None:
        pytest.skip("this host has no address but loopback")
    cfg = engine_config({"kv_role": "prefill", "kv_side_channel_host": outward})
    with pytest.raises(ConfigError, match=f"--kv-side-channel-host {outward} faces other hosts: give every prefill "
                                          "and decode server of the pool the same --kv-secret"):
        check_kv_hosts(cfg.kv_transfer, cfg.parallel)
    from moeserve.server.config_file import build_configs

    with pytest.raises(ConfigError, match="faces other hosts"):  # the API key is no pool secret
        build_configs({"kv_role": "prefill", "kv_side_channel_host": outward, "api_key": "k" * 32})
    check_kv_hosts(engine_config({"kv_role": "prefill", "kv_side_channel_host": outward,
                                  "kv_secret": "x" * 32}).kv_transfer, cfg.parallel)
    monkeypatch.setenv("MOESERVE_KV_SECRET", "y" * 32)
    check_kv_hosts(cfg.kv_transfer, cfg.parallel)


def test_missing_nixl_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.startswith("nixl") else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'moeserve\[pd\]'"):
        engine_config({"kv_role": "decode"}).validate()
    engine_config({}).validate()  # the colocated default never needs it


def test_the_pools_secret_is_never_the_api_key_and_never_shown(monkeypatch):
    """Every client holds the API key; whoever holds the pool's secret signs as a server of the pool.
    So --api-key is never the default secret (it was: any client could then sign parameters and
    side-channel calls), and a --kv-secret or MOESERVE_KV_SECRET equal to it is refused."""
    from moeserve.server.config_file import build_configs

    monkeypatch.delenv("MOESERVE_KV_SECRET", raising=False)
    engine, _ = build_configs({"kv_role": "prefill", "api_key": "the-server-key"})
    assert engine.kv_transfer.secret is None  # this user's secret file (trust.key_for), not the API key
    engine, _ = build_configs({"kv_role": "prefill", "api_key": "the-server-key", "kv_secret": "the-pool-secret"})
    assert engine.kv_transfer.secret == "the-pool-secret" and "the-pool-secret" not in repr(engine)
    with pytest.raises(ConfigError, match="--kv-secret must not be the --api-key: clients hold the API key"):
        build_configs({"kv_role": "decode", "api_key": "the-server-key", "kv_secret": "the-server-key"})
    monkeypatch.setenv("MOESERVE_KV_SECRET", "the-server-key")
    with pytest.raises(ConfigError, match="MOESERVE_KV_SECRET must not be the --api-key"):
        build_configs({"kv_role": "prefill", "api_key": "the-server-key"})
    monkeypatch.setenv("MOESERVE_KV_SECRET", "from-the-environment")
    engine, _ = build_configs({"kv_role": "prefill", "api_key": "the-server-key"})
    assert engine.kv_transfer.secret is None  # the environment's, read where the key is made (trust.key_for)
    engine, _ = build_configs({"api_key": "from-the-environment"})  # no KV transfer: nothing signs with it
    assert engine.kv_transfer.secret is None


def test_a_side_channel_host_no_interface_holds_is_named_at_start_up():
    """"0" is 0.0.0.0 to the socket layer (every interface), and a mistyped address no interface holds:
    both ended in a traceback inside the engine; now one ConfigError before it starts."""
    from moeserve.engine.startup_checks import check_startup

    for host in ("0", "192.0.2.1"):  # 192.0.2.0/24: TEST-NET-1, on no host's interface
        with pytest.raises(ConfigError, match="is not an address of any interface of this host"):
            check_startup(engine_config({"kv_role": "prefill", "kv_side_channel_host": host}))
    check_startup(engine_config({"kv_role": "prefill"}))  # 127.0.0.1: loopback
