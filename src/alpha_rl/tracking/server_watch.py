"""`mlflow server` as a watched child of the launcher: it listens where announced, nowhere else.

The launcher does not become `mlflow server` (os.execve) but starts it as a child in a process
group of its own and stays beside it:
- A stop signal (SIGINT, a terminal's Ctrl-C, which reaches the launcher alone; SIGTERM;
  SIGHUP) is passed on to that group as SIGTERM, so that every process of the server (MLflow's
  command, uvicorn's supervisor, its workers) ends gracefully and quietly: a SIGINT would be a
  KeyboardInterrupt, and a traceback, in whichever of them is still importing or starting. A
  second stop signal sends SIGKILL. The launcher then says `tracking server stopped
  (interrupted)` (terminated, hung up) in one line and exits 128 + the number of the signal it
  received: 130, 143, 129. A server that ends without a stop signal is an error: its status,
  or 1 when that is 0 (MLflow's command exits 0 whatever uvicorn did, a failed bind included).
  Whatever of the group outlives the child gets SIGTERM, then SIGKILL after STOP_WAIT_S.
- The listening TCP sockets of the child's process tree (psutil; LISTEN is a TCP state) are read
  every STARTING_POLL_S while it starts. A listener on any other address or port (0.0.0.0 when
  127.0.0.1 was announced) stops the whole tree at once with SIGKILL, a server listening where
  nobody checked must not answer one more request, and the launcher exits 2 with one line naming
  it. Once the announced listener is there and no other, "listening on ..." is printed. With
  several workers (the launcher's default, 4) uvicorn binds before its workers import the app,
  which takes seconds, so a stray listener is caught before it serves; with --workers 1 it binds
  once the app is loaded and serves at once, so a stray listener may answer for up to
  STARTING_POLL_S before it is stopped.
- Then they are read every WATCH_POLL_S while it runs: uvicorn replaces a worker that dies for
  the life of the server, and a listener opened later would otherwise never be seen. A reading
  scans /proc for the tree and reads /proc/<pid>/net/tcp{,6} for each process holding a socket
  (3 with 2 workers): about a millisecond of CPU on a plain Linux kernel, 50 ms in a sandbox
  whose /proc is emulated (10% of a core while the server starts, 1% afterwards).
- While it starts, a StartWatch (alpha_rl.tracking.server_answer) given by the caller waits for
  its first HTTP answer; it is told when the child exits, and silenced by a forwarded signal.
Addresses are compared resolved: the announced host's addresses (getaddrinfo for a name), an
IPv4-mapped IPv6 address as its IPv4 one, and for a loopback announcement any loopback address,
IPv4 or IPv6, counts as announced, since only this machine reaches either.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from alpha_rl.tracking.server_answer import StartWatch

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STARTING_POLL_S = 0.5  # how often the sockets are read until the server listens
WATCH_POLL_S = 5.0  # ... and afterwards
STOP_WAIT_S = 10.0  # how long a SIGTERM-ed process gets before SIGKILL
STOPPED_BY = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def ip(text: str) -> Address:
    """The address of `text` ('::ffff:127.0.0.1' as 127.0.0.1, '[::1]' as ::1)."""
    address = ipaddress.ip_address(text.strip("[]"))
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class Announced:
    """Where the server was announced: `host` as given, its resolved `addresses`, `port`."""

    host: str
    port: int
    addresses: frozenset[Address]

    @classmethod
    def resolve(cls, host: str, port: int) -> Announced:
        """`host` resolved as the server will bind it (socket.gaierror when it cannot be)."""
        try:
            return cls(host, port, frozenset({ip(host)}))
        except ValueError:  # a name
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            return cls(host, port, frozenset(ip(info[4][0]) for info in infos))

    def admits(self, address: Address, port: int) -> bool:
        """True for a listener on the announced port at an announced address."""
        if port != self.port:
            return False
        loopback = all(a.is_loopback for a in self.addresses)
        return address in self.addresses or (loopback and address.is_loopback)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket of process `pid`."""

    address: Address
    port: int
    pid: int

    def __str__(self) -> str:
        host = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return f"{host}:{self.port} (pid {self.pid})"


def tree(pid: int) -> list[psutil.Process]:
    """Process `pid` and its descendants ([] once it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def group(pgid: int) -> list[psutil.Process]:
    """The processes of process group `pgid` (this user's, as far as they can be read)."""
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
    return members


def listeners(procs: list[psutil.Process]) -> list[Listener]:
    """The listening TCP sockets of `procs` (psutil.AccessDenied when one cannot be read)."""
    found = []
    for proc in procs:
        try:
            conns = proc.net_connections(kind="tcp")
        except psutil.NoSuchProcess:  # ended meanwhile, or a zombie
            continue
        found += [Listener(ip(c.laddr.ip), c.laddr.port, proc.pid) for c in conns
                  if c.status == psutil.CONN_LISTEN]  # fmt: skip
    return found


def ended(proc: psutil.Process) -> bool:
    """Whether `proc` has ended: gone, or a zombie whose every thread has exited. A zombie
    leader with threads still exiting (a SIGKILLed uvicorn, say) may hold its sockets yet."""
    try:
        return not proc.is_running() or (
            proc.status() == psutil.STATUS_ZOMBIE and proc.num_threads() <= 1
        )
    except psutil.NoSuchProcess:
        return True


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `procs` not ended (see ended)."""
    return [proc for proc in procs if not ended(proc)]


def signal_all(procs: list[psutil.Process], sig: int) -> None:
    """`sig` to every process group of `procs` (reaching members started since) and to each."""
    groups = set()
    for proc in alive(procs):
        try:
            groups.add(os.getpgid(proc.pid))
            proc.send_signal(sig)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    for group in groups - {os.getpgrp()}:  # never the caller's own group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, sig)


def end(procs: list[psutil.Process], sig: int, wait_s: float) -> list[psutil.Process]:
    """`sig` to `procs` (signal_all), then wait up to `wait_s` for them; those still running."""
    signal_all(procs, sig)
    deadline = time.monotonic() + wait_s
    while (left := alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def stopped(sig: int) -> int:
    """Say in one line (stderr) that a stop signal ended the server; 128 + its number."""
    print(f"tracking server stopped ({STOPPED_BY.get(sig, signal.Signals(sig).name)})",
          file=sys.stderr, flush=True)  # fmt: skip
    return 128 + sig


def run_watched(command: list[str], env: dict[str, str], announced: Announced, *,
                output: Path | None = None, start: StartWatch | None = None) -> int:  # fmt: skip
    """Run `command` as a watched child (see the module docstring): 2 when its process tree
    listened anywhere else than `announced`, 128 + the signal's number when a stop signal ended
    it, else its own exit status, 1 for 0 (a server ends only when stopped). `output`: a file the
    child's output is appended to (None: this process's); `start`: what waits for its first
    answer (alpha_rl.tracking.server_answer), told when it exits and stopped by a stop signal."""
    child: list[subprocess.Popen] = []
    stops: list[int] = []  # the stop signals received, the first one first

    def stop(sig: int, _frame: object) -> None:
        if start is not None:  # the user stops it: no more waiting, no error for its exit
            start.silence()
        stops.append(sig)
        if child:
            _stop_group(child[0], len(stops))

    previous = {sig: signal.signal(sig, stop) for sig in FORWARDED}
    seen: dict[int, psutil.Process] = {}
    try:
        with open(output, "ab") if output else contextlib.nullcontext() as sink:
            child.append(subprocess.Popen(command, env=env, process_group=0, stdout=sink,
                                          stderr=subprocess.STDOUT if sink else None))  # fmt: skip
        if stops:  # a stop signal came while it was being started
            _stop_group(child[0], len(stops))
        if start is not None:
            start.begin()
        code = _watch(child[0], announced, seen)
        if code is None:
            return 2
        if stops:
            return stopped(stops[0])
        if start is not None:
            start.ended(code)
        return code or 1
    finally:
        if start is not None:
            start.stop()
        if child:  # what outlives the child (its group, and any seen that left it); the child
            # too, should the watch itself fail. Its pid names no other process while its group
            # lives on: Linux gives out no pid in use as a process group's
            members = [*seen.values(), *group(child[0].pid)]
            rest = list({p.pid: p for p in members}.values())
            if end(rest, signal.SIGTERM, STOP_WAIT_S):
                end(rest, signal.SIGKILL, STOP_WAIT_S)
            child[0].wait()
        for sig, handler in previous.items():  # after the clean-up: a signal meanwhile is ours
            signal.signal(sig, handler)


def _stop_group(child: subprocess.Popen, nth: int) -> None:
    """The `nth` stop signal, passed on to the server's process group: SIGTERM first, SIGKILL
    for any after it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM if nth == 1 else signal.SIGKILL)


def _watch(child: subprocess.Popen, announced: Announced,
           seen: dict[int, psutil.Process]) -> int | None:  # fmt: skip
    """The child's exit status once it exits (128 + the signal's number for a signal), None
    when it was stopped for listening elsewhere (an error line said so)."""
    listening = False
    while True:
        try:
            code = child.wait(timeout=WATCH_POLL_S if listening else STARTING_POLL_S)
            return code if code >= 0 else 128 - code
        except subprocess.TimeoutExpired:
            pass
        procs = tree(child.pid)
        seen |= {p.pid: p for p in procs[1:]}
        try:
            found = listeners(procs)
        except psutil.AccessDenied as exc:
            _stop(child, procs, f"cannot read the sockets of its process {exc.pid}")
            return None
        stray = [f for f in found if not announced.admits(f.address, f.port)]
        if stray:
            where = ", ".join(str(s) for s in stray)
            _stop(child, procs, f"it listens on {where}, not only on the announced {announced}")
            return None
        if found and not listening:
            print(f"listening on {announced} (checked: nowhere else)", flush=True)
            listening = True


def _stop(child: subprocess.Popen, procs: list[psutil.Process], what: str) -> None:
    end(procs, signal.SIGKILL, STOP_WAIT_S)
    child.wait()
    print(f"error: stopped the tracking server: {what}; check the options after -- and the "
          "environment", file=sys.stderr, flush=True)  # fmt: skip
