"""Hosts of their own on one machine: Linux network namespaces on one bridge (issue 36).

:class:`Network` makes a switch (a namespace holding a Linux bridge) and any number of
hosts, each a network namespace with one veth link to the switch and its own address
in a private ``/24``; the test process itself joins the switch as one more host
(:attr:`Network.gateway`), so that it can reach every host's address as a client
does. Processes run on a host through ``ip netns exec``.

Links are cut and restored in three ways:

- :meth:`Network.isolate` / :meth:`Network.restore`: ``ip link set down`` on the host's
  port of the switch: the host reaches nobody and nobody reaches it;
- :meth:`Network.cut` / :meth:`Network.heal`: blackhole routes between two hosts only
  (both ways), so that a master can reach agent A but not agent B while A and B still
  reach each other, or two agents lose each other while both reach the master;
- :meth:`Network.shape`: ``tc netem`` loss and delay on a host's link (needs the kernel's
  ``sch_netem``; :func:`netem_available` says whether it is there).

Only addresses inside these namespaces are ever targeted. Why a hand-written fixture:
no maintained Python library makes namespaced test networks (pyroute2 could issue the
same netlink calls, but would be one more dependency for a few ``ip`` commands), and
Debian's ``iproute2`` is what an operator would use by hand.

Cleanup always happens: :meth:`Network.close` (called by the fixture's ``finally`` and
at interpreter exit) kills every process still running in the namespaces, then deletes
the namespaces and the test process's link. A network needs root and ``ip``;
:func:`unavailable` names what is missing, for a skip that says why.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

PREFIX = "dnt"
"""Every namespace and link this fixture makes starts with this (then the creator's pid)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip ARGS``.

    Raises:
        RuntimeError: ``check`` and the command failed (its stderr is in the message).
    """
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def unavailable() -> str | None:
    """Why namespaced hosts cannot be made here (a reason for ``pytest.skip``), or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "namespaced test hosts need root (ip netns add, veth links)"
    if shutil.which("ip") is None:
        return "namespaced test hosts need iproute2's `ip` command"
    probe = f"{PREFIX}{os.getpid()}probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def netem_available() -> bool:
    """Whether ``tc netem`` (loss, delay) works on this kernel (module ``sch_netem``)."""
    if shutil.which("tc") is None:
        return False
    ns = f"{PREFIX}{os.getpid()}tc"
    if _ip("netns", "add", ns, check=False).returncode != 0:
        return False
    try:
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem"],
            capture_output=True,
            timeout=30,
        )
        return proc.returncode == 0
    finally:
        _ip("netns", "del", ns, check=False)


@dataclass(frozen=True)
class Host:
    """One namespaced host.

    Attributes:
        name: the test's name for it (``master``, ``a``, ...).
        netns: the namespace's name.
        addr: its IPv4 address on the switch.
        port: its link's end in the switch namespace (what :meth:`Network.isolate` downs).
    """

    name: str
    netns: str
    addr: str
    port: str

    def argv(self, *argv: str) -> list[str]:
        """``argv`` run inside this host's namespace (``ip netns exec``, which execs it:
        the process started is the command itself, its pid the command's)."""
        return ["ip", "netns", "exec", self.netns, *argv]


class Network:
    """A switch and namespaced hosts (see the module).

    Args:
        names: the hosts to make, e.g. ``("master", "a", "b")``; each gets an address.

    Raises:
        RuntimeError: an ``ip`` command failed (everything made so far is removed).
    """

    _count = 0

    def __init__(self, names: tuple[str, ...]) -> None:
        Network._count += 1
        self.tag = f"{PREFIX}{os.getpid()}x{Network._count}"
        self.switch = f"{self.tag}-sw"
        self.hosts: dict[str, Host] = {}
        self._netns: list[str] = []
        self._root_link: str | None = None
        self._closed = False
        atexit.register(self.close)
        try:
            self.subnet = _free_subnet()
            addrs = list(self.subnet.hosts())
            self._add_netns(self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for i, name in enumerate(names):
                self.hosts[name] = self._add_host(name, i, str(addrs[i]))
            # The test process's own link (its end stays in the root namespace).
            self._root_link = f"{self.tag}t"[:15]
            port = f"{self.tag}T"[:15]
            _ip("link", "add", self._root_link, "type", "veth", "peer", "name", port)
            _ip("link", "set", port, "netns", self.switch)
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            self.gateway = str(addrs[-1])
            _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self._root_link)
            _ip("link", "set", self._root_link, "up")
        except BaseException:
            self.close()
            raise

    def _add_netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._netns.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _add_host(self, name: str, index: int, addr: str) -> Host:
        ns = f"{self.tag}-{name}"
        self._add_netns(ns)
        end, port = f"{self.tag}h{index}"[:15], f"{self.tag}s{index}"[:15]
        _ip("link", "add", end, "type", "veth", "peer", "name", port)
        _ip("link", "set", end, "netns", ns)
        _ip("link", "set", port, "netns", self.switch)
        _ip("-n", ns, "link", "set", end, "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{addr}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        return Host(name, ns, addr, port)

    # ------------------------------------------------------------------ faults

    def isolate(self, name: str) -> None:
        """Cut host ``name`` off from every other (its switch port down)."""
        _ip("-n", self.switch, "link", "set", self.hosts[name].port, "down")

    def restore(self, name: str) -> None:
        """Undo :meth:`isolate`."""
        _ip("-n", self.switch, "link", "set", self.hosts[name].port, "up")

    def cut(self, a: str, b: str) -> None:
        """Cut hosts ``a`` and ``b`` off from each other only (both directions drop
        what they send each other); both still reach every other host."""
        ha, hb = self.hosts[a], self.hosts[b]
        _ip("-n", ha.netns, "route", "add", "blackhole", f"{hb.addr}/32")
        _ip("-n", hb.netns, "route", "add", "blackhole", f"{ha.addr}/32")

    def heal(self, a: str, b: str) -> None:
        """Undo :meth:`cut`."""
        ha, hb = self.hosts[a], self.hosts[b]
        _ip("-n", ha.netns, "route", "del", "blackhole", f"{hb.addr}/32", check=False)
        _ip("-n", hb.netns, "route", "del", "blackhole", f"{ha.addr}/32", check=False)

    def shape(self, name: str, loss_percent: float = 0.0, delay_ms: float = 0.0) -> None:
        """``tc netem`` loss (percent of packets) and delay (milliseconds) on what host
        ``name`` sends; both 0 removes the shaping.

        Raises:
            RuntimeError: ``tc`` failed (no ``sch_netem``: see :func:`netem_available`).
        """
        host = self.hosts[name]
        base = ["ip", "netns", "exec", host.netns, "tc", "qdisc"]
        subprocess.run([*base, "del", "dev", "eth0", "root"], capture_output=True, timeout=30)
        if loss_percent or delay_ms:
            proc = subprocess.run(
                [*base, "add", "dev", "eth0", "root", "netem"]
                + (["loss", f"{loss_percent}%"] if loss_percent else [])
                + (["delay", f"{delay_ms}ms"] if delay_ms else []),
                capture_output=True,
                text=True,
                timeout=30,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"tc netem on {name} failed: {proc.stderr.strip()}")

    # ------------------------------------------------------------------ cleanup

    def pids(self) -> list[int]:
        """The processes running in the hosts' namespaces (``ip netns pids``)."""
        out: list[int] = []
        for ns in self._netns:
            proc = _ip("netns", "pids", ns, check=False)
            out += [int(p) for p in proc.stdout.split() if p.isdigit()]
        return out

    def close(self) -> None:
        """Kill what still runs in the namespaces (SIGKILL), then delete them and the
        test process's link. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        for ns in reversed(self._netns):
            _ip("netns", "del", ns, check=False)
        if self._root_link is not None:
            _ip("link", "del", self._root_link, check=False)


def _free_subnet() -> ipaddress.IPv4Network:
    """A ``/24`` in 10.200.0.0/13 that no address or route of this machine's root
    namespace overlaps."""
    taken: list[ipaddress.IPv4Network] = []
    for line in (_ip("-4", "-o", "addr").stdout + _ip("-4", "route").stdout).splitlines():
        for word in line.split():
            try:
                taken.append(ipaddress.ip_network(word, strict=False))  # type: ignore[arg-type]
            except ValueError:
                continue
    rng = random.Random()
    for _ in range(200):
        net = ipaddress.IPv4Network(f"10.{rng.randrange(200, 208)}.{rng.randrange(256)}.0/24")
        if not any(net.overlaps(t) for t in taken if t.version == 4 and t.prefixlen > 0):
            return net
    raise RuntimeError("no free /24 in 10.200.0.0/13 for the test network")
