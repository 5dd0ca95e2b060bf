"""The namespaces themselves (tests/netns.py): hosts reach each other over the switch, a cut
stops that and leaves the front link, a heal restores it, and nothing outlives the network,
a crashed run's leftovers included."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.netns import (
    PREFIX,
    build_network,
    clean_leftovers,
    ip,
    namespaces,
    network,
    numbers_locked,
)
from tests.procs import spawn, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.partitions]

PORT = 7000
# A one-connection-at-a-time TCP server that answers each connection with its host's name.
SERVER = ("import socket,sys\n"
          "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()\n"
          "while True:\n"
          "    c,_=s.accept(); c.sendall(sys.argv[3].encode()); c.close()\n")
CLIENT = ("import socket,sys\n"
          "try:\n"
          "    print(socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)"
          ".recv(64).decode())\n"
          "except OSError as exc:\n"
          "    print(type(exc).__name__)\n")


def ask_from(netns: str, address: str) -> str:
    """What a client inside ``netns`` gets from the server at ``address``."""
    result = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", CLIENT,
                             address, str(PORT)], capture_output=True, text=True, timeout=30)
    return result.stdout.strip()


def ask_from_here(address: str) -> str:
    try:
        with socket.create_connection((address, PORT), timeout=2) as conn:
            return conn.recv(64).decode()
    except OSError as exc:
        return type(exc).__name__


def test_hosts_reach_each_other_a_cut_stops_it_and_a_heal_restores_it(tmp_path) -> None:
    with network({"data": False, "hostB": True}) as net:
        data, b = net.hosts["data"], net.hosts["hostB"]
        servers = [spawn("data-server", [sys.executable, "-c", SERVER, data.back, str(PORT),
                                         "data"], env={}, log_dir=tmp_path, netns=data.netns),
                   spawn("b-server", [sys.executable, "-c", SERVER, b.front or "", str(PORT),
                                      "hostB"], env={}, log_dir=tmp_path, netns=b.netns)]
        wait_until(lambda: ask_from(b.netns, data.back) == "data", timeout=20,
                   what="hostB reaches the data host")
        assert ask_from_here(data.back) == "data"  # the test process is on the switch too
        # hostB's server started beside the data host's and may still be binding: wait for it
        # too (found by CI: ConnectionRefusedError, asked before it listened).
        wait_until(lambda: ask_from_here(b.front or "") == "hostB", timeout=20,
                   what="the test process reaches hostB's front")
        net.cut("hostB")
        # Silence, not a refusal: the packets vanish (EHOSTUNREACH once ARP gives up).
        assert ask_from(b.netns, data.back) in ("TimeoutError", "OSError")
        assert ask_from_here(b.front or "") == "hostB", "the front link went down with the cut"
        assert ask_from_here(data.back) == "data"
        net.heal("hostB")
        wait_until(lambda: ask_from(b.netns, data.back) == "data", timeout=20,
                   what="hostB reaches the data host after the heal")
        # Nothing is routed beyond the links: no default route in a host's namespace.
        assert "default" not in ip("-n", b.netns, "route")
        names = [h.netns for h in net.hosts.values()] + [net.switch]
        links = net.root_links()
        assert len(links) == 2, links  # to the switch, and hostB's front link
    assert not set(names) & set(namespaces())
    assert all(not s.alive() or s.wait_exit(timeout=10) is not None for s in servers)
    left = {int(line.split(":", 1)[0]) for line in ip("-o", "link").splitlines()}
    assert not set(links) & left, "a root-namespace end outlived its network"


def test_a_crashed_runs_namespaces_are_removed_with_their_processes(tmp_path) -> None:
    # A run whose test process is gone: its pid is in the name, nobody has it.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = f"{PREFIX}{dead.pid}x1-data"
    sleeper = None
    try:
        # Under the numbering lock, so that no other xdist worker's new network cleans it
        # before this test's call does.
        with numbers_locked():
            ip("netns", "add", name)
            sleeper = spawn("leftover", [sys.executable, "-c", "import time; time.sleep(600)"],
                            env={}, log_dir=tmp_path, netns=name)
            wait_until(lambda: str(sleeper.pid) in ip("netns", "pids", name), timeout=10,
                       what="the leftover process runs inside")
            assert name in clean_leftovers()
        assert name not in namespaces()
        sleeper.wait_exit(timeout=10)  # SIGKILLed, not left running outside any namespace
    finally:
        if sleeper is not None:
            sleeper.stop()
        ip("netns", "del", name, check=False)


def test_the_network_is_removed_when_the_test_fails(tmp_path) -> None:
    names: list[str] = []
    doomed = []
    with pytest.raises(RuntimeError, match="the test failed"):
        with network({"data": False}) as net:
            names = [net.hosts["data"].netns, net.switch]
            doomed.append(spawn("doomed", [sys.executable, "-c", "import time; time.sleep(600)"],
                                env={}, log_dir=tmp_path, netns=net.hosts["data"].netns))
            raise RuntimeError("the test failed")
    assert not set(names) & set(namespaces())
    assert doomed[0].wait_exit(timeout=10) == -9  # SIGKILLed by close(), by its pid


def test_a_host_that_cannot_be_built_leaves_nothing_behind() -> None:
    before = set(namespaces())
    with pytest.raises(RuntimeError, match="netns add"):
        build_network({"data": False, "bad/name": False})  # not a valid namespace name
    assert set(namespaces()) <= before
