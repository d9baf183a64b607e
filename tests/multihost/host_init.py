"""The first process of a simulated host (harness.py): pid 1 of the host's own pid namespace, inside its
own network, UTS, IPC and mount namespaces. It gives the host its name, a private /dev/shm, its own
/etc/hosts, a sysfs showing its own network devices (UCX and psutil read /sys/class/net) and a loopback
that is up; then it says `ready` and reaps orphans until its standard input closes.

The harness holds the other end of that pipe: when the test process ends, however it ends (even by
SIGKILL), the pipe closes, this process exits, and the kernel kills every process left in the host's
pid namespace; its namespaces, its /dev/shm and its network links go with the last of them.

    python host_init.py host NAME HOSTS_FILE      a host
    python host_init.py switch                    the switch: a network namespace holding the bridge
"""
from __future__ import annotations

import os
import select
import subprocess
import sys


def _setup_host(name: str, hosts_file: str) -> None:
    for argv in (["hostname", name],
                 ["mount", "-t", "tmpfs", "-o", "mode=1777,size=2g", "tmpfs", "/dev/shm"],
                 ["mount", "--bind", hosts_file, "/etc/hosts"],
                 ["mount", "-t", "sysfs", "sysfs", "/sys"],
                 ["ip", "link", "set", "lo", "up"]):
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> int:
    if sys.argv[1] == "host":
        _setup_host(sys.argv[2], sys.argv[3])
    print("ready", flush=True)
    stdin = sys.stdin.buffer
    while True:
        readable, _, _ = select.select([stdin], [], [], 0.2)
        _reap()  # orphans of the host are re-parented to us, its pid 1
        if readable and not os.read(stdin.fileno(), 4096):
            return 0


if __name__ == "__main__":
    sys.exit(main())
