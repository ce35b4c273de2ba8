"""Stopping a run that XLA's CPU runtime has left idle for good.

Seen on the 2-core development machine (a ``backend_check`` sweep worker, Gymnasium backend): the
first compiled call of a run never returned. Every XLA and Python thread of the process sat in a
futex wait, the main thread in ``CpuPjRtRawLoadedExecutable::Execute`` waiting for a completion
that no thread would signal, and the process used no CPU for 13 minutes until it was killed; run
again, the same run went through. It happened with the concurrency-optimised scheduler off
(``bpo.infra.runtime``), so it is apparently a second lost wake-up in XLA:CPU, rarer than the first.
Seen again in a headline run continued from its checkpoint (a build from before this guard): its
first compiled call (the host runner's init program) hung twice in a row, 2 and 32 minutes with
no CPU, and the third start, with the persistent compilation cache off (``BPO_COMPILE_CACHE=''``),
went through; whether the cache has a part in it is not established.

Nothing inside the process can end the call, so ``stall_guard`` watches from a thread: when the
process has used almost no CPU time (all threads together) for ``BPO_STALL_MINUTES`` minutes
(default 10; 0 turns the guard off), it prints what happened and what to do, and exits with
``EXIT_STALLED`` (75, "try again"). The last checkpoint is intact (a checkpoint is written whole
or not at all), so the run continues from it. The guard counts windows of its own wake-ups, not
wall time, so a process stopped with SIGSTOP (a paused job) is not mistaken for a stalled one; and
the guard counts the CPU time of the processes the run started too (an evaluation worker the
training loop may be waiting for), and a window counts as idle only if none of their threads
waited for a CPU either (the kernel's run-queue time), so a process starved by busier ones, or
waiting for a starved worker, is not mistaken for a stalled one (seen: four Table 1 BPO runs at
low priority on a loaded machine, each stopped at its first evaluation). It runs only on the
CPU backend, where a compiled call that uses no CPU can only be waiting.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

STALL_ENV = "BPO_STALL_MINUTES"
DEFAULT_MINUTES = 10.0
EXIT_STALLED = 75
IDLE_FRACTION = 0.01  # a window in which the process used less than 1 % of one core counts as idle
STARVED_FRACTION = 0.1  # ... unless its threads waited for a CPU a tenth of it: the process is starved


MAX_MINUTES = 7 * 24 * 60.0
"""A week: the longest idleness the guard may be told to wait for."""


def stall_minutes() -> float:
    """``BPO_STALL_MINUTES`` (minutes of idleness before the guard stops the run; 0: never)."""
    value = os.environ.get(STALL_ENV, "")
    if not value:
        return DEFAULT_MINUTES
    try:
        minutes = float(value)
    except ValueError:
        minutes = -1.0
    if not 0 <= minutes <= MAX_MINUTES:  # finite: the guard's thread divides the wait into windows
        raise ValueError(f"{STALL_ENV}: must be a number of minutes from 0 to {MAX_MINUTES:g} (0: no guard), "
                         f"got {value!r}")
    return minutes


def _task_files(pid: int, name: str) -> Iterator[str]:
    """The text of ``/proc/PID/task/*/NAME`` for each thread of ``pid`` still there."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:  # a process that ended, or no /proc
        return
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/{name}") as f:
                yield f.read()
        except OSError:  # a thread that ended
            continue


def _descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (``/proc/PID/task/*/children``)."""
    found, todo = [], [pid]
    while todo:
        children = [int(c) for text in _task_files(todo.pop(), "children") for c in text.split()]
        found += children
        todo += children
    return found


def family_times() -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of this process's threads and of
    every process it started (an evaluation worker it may be waiting for), from the kernel's
    ``/proc/PID/task/*/schedstat``; (``time.process_time()``, 0) where the kernel does not say."""
    on_cpu = waited = 0
    seen = False
    for pid in [os.getpid(), *_descendants(os.getpid())]:
        for text in _task_files(pid, "schedstat"):
            run_ns, wait_ns = (int(x) for x in text.split()[:2])
            on_cpu, waited, seen = on_cpu + run_ns, waited + wait_ns, True
    return (on_cpu / 1e9, waited / 1e9) if seen else (time.process_time(), 0.0)


def _watch(stop: threading.Event, minutes: float, advice: Callable[[], str]) -> None:
    window = min(30.0, minutes * 60 / 4)  # at least four windows, so a SIGSTOP pause is one of many
    needed, idle = round(minutes * 60 / window), 0
    last, waited = family_times()
    while not stop.wait(window):
        now, waited_now = family_times()
        # A process whose workers compute is waiting for them, and little CPU while runnable threads
        # waited for one is a starved process (a low priority beside busy ones): neither is a
        # stalled call, whose threads all sleep.
        starved = waited_now - waited >= STARVED_FRACTION * window
        idle = idle + 1 if now - last < IDLE_FRACTION * window and not starved else 0
        last, waited = now, waited_now
        if idle >= needed:
            print(f"error: the run has used no CPU for {minutes:g} minutes inside a compiled call: XLA's CPU "
                  f"runtime appears to have lost a wake-up and the call will not return (bpo.infra.stall). {advice()}",
                  file=sys.stderr, flush=True)
            os._exit(EXIT_STALLED)


@contextmanager
def stall_guard(advice: Callable[[], str], cpu: bool = True) -> Iterator[None]:
    """Watch the block for a stall (module docstring); ``advice()`` says how to continue the run.
    ``cpu=False`` (an accelerator backend) turns the guard off."""
    minutes = stall_minutes()
    if minutes == 0 or not cpu:
        yield
        return
    stop = threading.Event()
    threading.Thread(target=_watch, args=(stop, minutes, advice), daemon=True, name="bpo-stall-guard").start()
    try:
        yield
    finally:
        stop.set()
