"""Which network interface holds an address (`interface_of`): what moeserve binds UCX (and other
listeners that take an interface, not an address) to, so they listen where their address says and
nowhere else; and which interface routes to an address (`route_interface`): what ranks on several
hosts talk over (engine/launch_check.py).

A leaf (psutil only): the KV transfer binds NIXL's UCX workers with it; anything that must pick the
interface facing a peer may use it.
"""
from __future__ import annotations

import ipaddress
import socket

import psutil

from moeserve.errors import ConfigError


def resolve(host: str) -> str:
    """`host` as an IP address (a name resolved once, the first address)."""
    try:
        return str(ipaddress.ip_address(host.split("%")[0]))
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except OSError as e:
        raise ConfigError(f"cannot resolve {host!r}: {e.strerror or e}") from None


def interface_of(host: str) -> str:
    """The name of this machine's interface that holds `host`'s address (loopback addresses: the
    loopback interface); ConfigError when none does."""
    address = ipaddress.ip_address(resolve(host))
    found = None
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                mine = ipaddress.ip_address(a.address.split("%")[0])
            except ValueError:
                continue
            if mine == address:
                return name
            if address.is_loopback and mine.is_loopback and found is None:
                found = name  # 127.0.0.2 and the like live on lo too
    if found is not None:
        return found
    raise ConfigError(f"{host} ({address}) is not an address of any interface of this host: give an address this "
                      "host holds, facing its peers")


def route_interface(host: str) -> tuple[str, str]:
    """(interface, source address) this machine's routing table picks to reach `host`: what its
    packets to `host` leave by. Asks the kernel (a UDP socket connected to `host` sends nothing);
    ConfigError when no route reaches it."""
    address = resolve(host)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((address, 9))
        except OSError as e:
            raise ConfigError(f"no route from this host to {host} ({address}): {e.strerror or e}") from None
        source = s.getsockname()[0]
    return interface_of(source), source


def is_loopback(interface: str) -> bool:
    """Whether `interface` carries loopback addresses only (lo), so it never leaves this host."""
    addrs = [a for a in psutil.net_if_addrs().get(interface, []) if a.family in (socket.AF_INET, socket.AF_INET6)]
    return bool(addrs) and all(ipaddress.ip_address(a.address.split("%")[0]).is_loopback for a in addrs)


def interface_addresses(interface: str) -> list[str]:
    """The IPv4 and IPv6 addresses `interface` holds; ConfigError when this host has no such interface."""
    addrs = psutil.net_if_addrs()
    if interface not in addrs:
        raise ConfigError(f"this host has no network interface {interface!r} (it has {', '.join(sorted(addrs))})")
    return [a.address.split("%")[0] for a in addrs[interface] if a.family in (socket.AF_INET, socket.AF_INET6)]
