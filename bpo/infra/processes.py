"""Child processes that never outlive their parent, and stop requests by SIGINT and SIGTERM.

A ``bpo`` process may start others: the evaluation worker of a Gymnasium run, the workers of an
``async`` vector environment, the worker processes of a sweep. Each calls ``die_with_parent`` as
the first thing it does, so a parent killed with SIGKILL (a timeout, the OOM killer, a cluster's
cancel) takes them with it: nothing keeps computing, holding memory or racing the next run.

SIGINT and SIGTERM, inside ``stop_requests()``, do not kill the process: they ask the training
loop to stop at the end of the current iteration (a rollout and its update, or a block of
episodes), where a checkpoint can be written. ``requested()`` is checked by the loops; they raise
``Interrupted``, which the command line turns into a message and exit code 128 + the signal
(130 for SIGINT, 143 for SIGTERM). A second SIGINT while a stop is pending ends the process at
once (Ctrl-C twice): ``KeyboardInterrupt`` when the main thread runs Python, and otherwise, since
Python runs signal handlers only between bytecodes and a compiled call can last minutes, a thread
woken through ``signal.set_wakeup_fd`` ends the process a second later with exit 130 (the call
is abandoned; the last checkpoint is intact, child processes die with it). A repeated SIGTERM is
ignored, since schedulers often send several (a preemption, then a requeue) and the stop under
way is what they ask for.

Sweep workers call it keeping SIGINT: the sweep forwards the signal to them.

**Which thread takes a signal.** A process-directed signal is delivered to some thread that does
not block it, and its handler runs on that thread's stack, interrupting whatever it was doing. In
``bpo`` that thread is often inside XLA's compiled code (the host runner calls it from the main
thread hundreds of times a second); a handler run on top of JIT-generated kernels is not safe with
every library XLA links (oneDNN documents heap corruption from exactly this, its AVX-512 GEMM
keeping its stack pointer in heap memory). Twice a CI run's ``bpo train`` aborted in glibc
("corrupted size vs. prev_size") right after a test sent it SIGINT or SIGTERM, before it printed
its message; neither was reproducible on the development machine (AMD, no AVX-512), and a third
came in a Slurm job, after ``scancel --signal`` sent it SIGTERM and SIGUSR2. So the ``bpo``
command, its sweep workers and a sweep's Slurm jobs (``experiments.launch.SlurmRun``, which adds
submitit's SIGUSR2 and SIGCONT) call ``receive_signals_on_a_thread()`` before XLA starts its
threads (no module computes with JAX on import, so importing ``bpo`` starts none): SIGINT and
SIGTERM are blocked in every thread (threads inherit the mask, XLA's included) and one thread
that runs nothing else takes them with ``sigwait`` and hands each to the main thread as Python
would (``_thread.interrupt_main``: the installed Python handler runs there, between bytecodes),
or ends the process as the default disposition would. What changes for Python code: a blocking
call in the main thread (a sleep, a lock wait) is no longer cut short by the signal, which takes
effect when the call returns. Child processes inherit the blocked mask; ``die_with_parent``, the
first thing each of ours does, unblocks it (sweep workers then block it again for their own thread;
multiprocessing's resource tracker keeps it, and ignores both signals anyway).
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing import resource_tracker

_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_requested: int | None = None


class Interrupted(Exception):
    """A SIGINT or SIGTERM stopped a run between two iterations; ``checkpoint`` is the folder that
    holds its state (None when the run was not checkpointing)."""

    def __init__(self, signum: int, where: str, checkpoint=None):
        self.signum, self.where, self.checkpoint = signum, where, checkpoint
        saved = f"; its checkpoint is in {str(checkpoint)!r}" if checkpoint is not None else \
            "; it was not checkpointing, so nothing of it is kept"
        super().__init__(f"stopped by {signal.Signals(signum).name} {where}{saved}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def die_with_parent(parent_pid: int | None = None, keep_sigint: bool = False) -> None:
    """Linux: this process gets SIGKILL when its parent dies, however it dies; and, unless
    ``keep_sigint``, it leaves SIGINT to the parent (a Ctrl-C reaches the whole process group, but
    the parent decides how the work stops). With ``parent_pid``, a parent that died before this call
    ends this process now. It also unblocks SIGINT and SIGTERM, which a child of a ``bpo`` program
    inherits blocked (``receive_signals_on_a_thread``). Called by the child itself, first thing (not
    as a ``preexec_fn``: running Python between fork and exec of a multithreaded process can deadlock)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # the parent's thread had them blocked
    if not keep_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def receive_signals_on_a_thread(also: tuple[int, ...] = ()) -> None:
    """From now on SIGINT and SIGTERM, and the signals ``also`` (a Slurm job: submitit's SIGUSR2 and
    SIGCONT), reach this process's Python handlers only through a thread of their own (module
    docstring), never by interrupting a thread that runs compiled code. Call it from the main thread
    before XLA starts its threads; once per process."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("receive_signals_on_a_thread: call it from the main thread")
    # multiprocessing's resource tracker, when it starts, unblocks both signals in the thread that
    # started it (a pool or a vector env would start it from the main thread mid-run): start it now.
    resource_tracker.ensure_running()
    signals = (*_STOP_SIGNALS, *also)
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    threading.Thread(target=_hand_over_signals, args=(signals,), daemon=True, name="bpo-signals").start()


def _hand_over_signals(signals: tuple[int, ...]) -> None:
    """Take each of ``signals`` and do what its disposition says: run the Python handler in the main
    thread, ignore it, or act as the default disposition does (end the process, or nothing)."""
    while True:
        signum = signal.sigwait(signals)
        handler = signal.getsignal(signum)
        if handler is signal.SIG_IGN:
            continue
        if handler is signal.SIG_DFL or handler is None:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])  # on this thread only: the default action
            signal.raise_signal(signum)
            signal.pthread_sigmask(signal.SIG_BLOCK, [signum])  # still here: a default that ends nothing (SIGCONT)
            continue
        _thread.interrupt_main(signum)


def requested() -> int | None:
    """The signal that asked for a stop, or None."""
    return _requested


def _request(signum, frame) -> None:
    global _requested
    if _requested is None:
        _requested = signum
    elif signum == signal.SIGINT:
        raise KeyboardInterrupt


GRACE_S = 1.0  # after a second SIGINT, the main thread's KeyboardInterrupt has this long to end the process


def _second_sigint(left: threading.Event) -> Callable[[int], None]:
    """For ``_watch_signals``: end the process a second after a SIGINT that follows another stop
    signal, unless the main thread has left the ``stop_requests`` block by then (its
    ``KeyboardInterrupt`` did the job)."""
    pending = False

    def on_signal(signum: int) -> None:
        nonlocal pending
        if pending and signum == signal.SIGINT and not left.wait(GRACE_S):
            print("stopped at once by a second SIGINT (the compiled call under way was abandoned; the last "
                  "checkpoint is intact)", file=sys.stderr, flush=True)
            os._exit(128 + signal.SIGINT)
        pending = pending or signum in _STOP_SIGNALS

    return on_signal


def _read(fd: int) -> bytes:
    """Bytes from ``fd``; at its end (b""), the descriptor is closed."""
    try:
        data = os.read(fd, 64)
    except OSError:
        data = b""
    if not data:
        os.close(fd)
    return data


@contextlib.contextmanager
def _watch_signals(on_signal: Callable[[int], None], name: str) -> Iterator[None]:
    """Within the block, ``on_signal(signum)`` runs on a thread of its own for every signal that
    reaches a Python handler, even while the main thread runs compiled code for minutes: the
    C-level handler writes the number to ``signal.set_wakeup_fd``'s pipe, which the thread reads."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)

    def watch() -> None:
        while data := _read(read_fd):
            for signum in data:
                on_signal(signum)

    threading.Thread(target=watch, daemon=True, name=name).start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_fd)
        os.close(write_fd)  # the watching thread reads end-of-file and ends


@contextlib.contextmanager
def stop_requests() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM request a stop (``requested()``) instead of ending the
    process, and a second SIGINT ends it at once; outside it they act as before."""
    global _requested
    previous = {s: signal.signal(s, _request) for s in _STOP_SIGNALS}
    _requested = None
    left = threading.Event()
    try:
        with _watch_signals(_second_sigint(left), "bpo-second-sigint"):
            try:
                yield
            finally:
                left.set()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _requested = None


@contextlib.contextmanager
def end_at_once(kept: str) -> Iterator[None]:
    """Within the block, SIGINT or SIGTERM ends the process within a moment, even inside a compiled
    call that lasts minutes: it prints ``stopped by SIGNAL: {kept}`` and exits 128 + the signal.
    For commands whose work is one computation written at its end (``bpo evaluate``, ``bpo
    probe``, ``bpo verify-variance``): there is nothing to checkpoint, and waiting for the call to
    return could take as long as the work. Wrap the computation, not the write, so that a stop
    never leaves half a file."""
    def leave(signum: int) -> None:
        print(f"stopped by {signal.Signals(signum).name}: {kept}", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    def on_signal(signum: int) -> None:
        if signum in _STOP_SIGNALS:
            leave(signum)

    previous = {s: signal.signal(s, lambda signum, frame: leave(signum)) for s in _STOP_SIGNALS}
    try:
        with _watch_signals(on_signal, "bpo-end-at-once"):
            yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
