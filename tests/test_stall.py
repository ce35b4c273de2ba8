"""``bpo.infra.stall``: a process idle inside the guard is stopped with exit 75 and the advice; a busy one,
or one paused with SIGSTOP, is not. Real processes and signals."""

import os
import signal
import subprocess
import sys
import time

import pytest

from bpo.infra.stall import EXIT_STALLED, STALL_ENV, stall_minutes

CHILD = """
import sys, time
from bpo.infra.stall import stall_guard
with stall_guard(lambda: "ADVICE: run it again"):
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        if sys.argv[1] == "idle":
            time.sleep(0.05)  # as a main thread blocked in a compiled call that will never return
        else:
            sum(range(10_000))  # a compiled call at work
print("finished")
"""


def child(mode: str, seconds: float, minutes: str = "0.05") -> subprocess.Popen:
    env = {**os.environ, STALL_ENV: minutes}  # 0.05 minutes: four windows of 0.75 s
    return subprocess.Popen([sys.executable, "-c", CHILD, mode, str(seconds)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_an_idle_process_is_stopped_with_the_advice_and_exit_75():
    start = time.monotonic()
    proc = child("idle", 60)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_STALLED
    assert "used no CPU for 0.05 minutes" in err and "ADVICE: run it again" in err
    assert "finished" not in out
    assert time.monotonic() - start < 30  # stopped after about 3 s of idleness, not at the end of the 60 s


def test_a_busy_process_and_a_disabled_guard_are_left_alone():
    busy = child("busy", 6)
    assert busy.communicate(timeout=60)[0].strip() == "finished" and busy.returncode == 0
    off = child("idle", 5, minutes="0")
    assert off.communicate(timeout=60)[0].strip() == "finished" and off.returncode == 0


def test_a_pause_by_sigstop_is_not_a_stall():
    """The guard counts its own wake-ups: a 5 s SIGSTOP (longer than the 3 s limit) is one window."""
    proc = child("busy", 6)
    time.sleep(1.5)
    proc.send_signal(signal.SIGSTOP)
    time.sleep(5)
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == "finished", err


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf", "1e9"])
def test_a_bad_setting_names_the_variable(monkeypatch, value):
    """Infinite or absurd waits too: the guard's thread divides its wait into windows, and inf
    crashed it, leaving the run unguarded."""
    monkeypatch.setenv(STALL_ENV, value)
    with pytest.raises(ValueError, match=f"{STALL_ENV}: must be a number of minutes from 0 to 10080"):
        stall_minutes()


STARVED = """
import os, sys, time
from bpo.infra.stall import stall_guard
os.sched_setaffinity(0, {int(sys.argv[1])})
os.nice(19)  # beside two busy neighbours at nice 0 on its core: under 1 % of it
with stall_guard(lambda: "ADVICE"):
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        sum(range(10_000))  # runnable all along, but given almost no CPU
print("finished")
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="the kernel reports no run-queue time")
def test_a_starved_process_is_not_a_stall():
    """A runnable process that busy neighbours on its core leave almost no CPU (nice 19 beside two at
    nice 0) uses less than 1 % of a core in the guard's windows, as a stalled one does, but its
    threads wait for the CPU: it is left to finish."""
    core = sorted(os.sched_getaffinity(0))[0]
    # The neighbours stop by themselves after the starved process's 8 s, so that it can then finish.
    busy = (f"import os, time\nos.sched_setaffinity(0, {{{core}}})\n"
            "end = time.monotonic() + 10\nwhile time.monotonic() < end: pass")
    hogs = [subprocess.Popen([sys.executable, "-c", busy]) for _ in range(2)]
    try:
        env = {**os.environ, STALL_ENV: "0.05"}
        proc = subprocess.run([sys.executable, "-c", STARVED, str(core), "8"], env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert proc.returncode == 0, proc.stderr
    assert "finished" in proc.stdout


WAITING = """
import subprocess, sys
from bpo.infra.stall import stall_guard
with stall_guard(lambda: "ADVICE"):
    # as a training loop waiting for its evaluation worker: no CPU here, all of it in the child
    busy = "import time\\nend = time.monotonic() + 8\\nwhile time.monotonic() < end: pass"
    subprocess.run([sys.executable, "-c", busy])
print("finished")
"""


@pytest.mark.skipif(not os.path.exists(f"/proc/self/task/{os.getpid()}/children"),
                    reason="the kernel does not list a process's children")
def test_a_process_waiting_for_its_busy_worker_is_not_a_stall():
    proc = subprocess.run([sys.executable, "-c", WAITING], env={**os.environ, STALL_ENV: "0.05"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "finished" in proc.stdout
