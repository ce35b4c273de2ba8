"""A real single-node Slurm cluster for tests, built from Debian's `slurm-wlm` and `munge` packages.

The sweep launcher submits through submitit, whose behaviour (sbatch scripts, job arrays, result
pickles, state polling) is only really exercised against a live slurmctld/slurmd pair, so this module
starts one on the test machine instead of faking the Slurm commands. It needs root (or passwordless
sudo) because slurmd launches jobs as the submitting user; a test using `slurm_env` is skipped only
when the packages cannot be installed at all.

Accounting is deliberately off (no slurmdbd/MySQL), so `sacct` fails. submitit tolerates that: it logs
"Bypassing sacct error" and decides completion from the job's result pickle, which it checks every
second, so `job.result()` still returns promptly for jobs that finish. (A job killed before writing its
result would leave submitit waiting on state UNKNOWN, so tests should bound their waits.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import pytest

PARTITION = "debug"
_SBIN = ("/usr/sbin", "/sbin")
_REQUIRED = ("sbatch", "slurmctld", "slurmd", "munged")
MUNGE_KEY = Path("/etc/munge/munge.key")


class SlurmCluster(TypedDict):
    env: dict[str, str]  # what the caller must export for the Slurm commands to find the cluster
    partition: str


def _which(name: str) -> str | None:
    """Finds daemons in sbin too, which a non-root PATH usually lacks."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *_SBIN]))


def _root_prefix() -> list[str] | None:
    """The command prefix that runs as root: none when root, `sudo -n` when that works, else None."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def ensure_slurm_installed() -> str | None:
    """Installs slurm-wlm and munge with apt when missing; returns why that is impossible, or None."""
    if all(_which(name) for name in _REQUIRED):
        return None
    prefix = _root_prefix()
    if prefix is None:
        return "Slurm is not installed and installing it needs root or passwordless sudo"
    if shutil.which("apt-get") is None:
        return "Slurm is not installed and there is no apt-get to install it with"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # `env` through sudo too: sudo drops DEBIAN_FRONTEND otherwise, and debconf would prompt.
    apt = [*prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]
    for args in (["update"], ["install", "-y", "--no-install-recommends", "slurm-wlm", "munge"]):
        proc = subprocess.run([*apt, *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            return f"`apt-get {' '.join(args)}` failed ({proc.returncode}):\n{_tail(proc.stdout + proc.stderr)}"
    missing = [name for name in _REQUIRED if not _which(name)]
    return f"apt-get installed slurm-wlm and munge but {missing} are still missing" if missing else None


def _munge_works() -> bool:
    """True when a munged answers on the default socket (credential round trip)."""
    munge, unmunge = _which("munge"), _which("unmunge")
    if not (munge and unmunge):
        return False
    cred = subprocess.run([munge, "-n"], capture_output=True, timeout=10)
    if cred.returncode != 0:
        return False
    return subprocess.run([unmunge], input=cred.stdout, capture_output=True, timeout=10).returncode == 0


def _start_munged(root: list[str], log: Path) -> subprocess.Popen[bytes] | None:
    """Starts munged as the `munge` user unless one already runs; returns the process it started.

    Without systemd nobody creates /run/munge or, on some images, the key: munged refuses keys and
    directories that are not owned by its user or are group/world accessible, hence the chown/chmod.
    """
    if _munge_works():
        return None
    # Tested as root: /etc/munge is mode 0700, so an unprivileged stat cannot see the key.
    if subprocess.run([*root, "test", "-e", str(MUNGE_KEY)]).returncode != 0:
        mungekey = _which("mungekey")
        create = [mungekey, "--create", f"--keyfile={MUNGE_KEY}"] if mungekey else [
            "dd", "if=/dev/urandom", f"of={MUNGE_KEY}", "bs=1024", "count=1"]
        subprocess.run([*root, *create], check=True, capture_output=True)
    private = ["/etc/munge", "/var/log/munge", "/var/lib/munge"]
    for cmd in (
        ["mkdir", "-p", "/run/munge", *private],
        ["chown", "munge:munge", str(MUNGE_KEY), "/run/munge", *private],
        ["chmod", "0400", str(MUNGE_KEY)],
        ["chmod", "0700", *private],
        ["chmod", "0755", "/run/munge"],
    ):
        subprocess.run([*root, *cmd], check=True)
    # setpriv execs munged as `munge` in place (runuser would fork and outlive it), so stopping the
    # process we hold stops munged itself.
    setpriv = ["setpriv", "--reuid=munge", "--regid=munge", "--init-groups"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*root, *setpriv, _which("munged") or "munged", "--foreground"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    for _ in range(50):
        if _munge_works():
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    _stop(proc)
    raise RuntimeError(f"munged did not start:\n{_tail(log.read_text(errors='replace'))}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slurm_conf(workdir: Path, host: str) -> str:
    """A minimal config: one node with this machine's CPUs, no cgroups (containers lack them), no
    accounting, and per-CPU scheduling so that several one-CPU jobs share the node. Each job is bound
    to its CPUs (``task/affinity``, as on most clusters): a job spread over every core beside another
    JAX process can stall in a compiled call (docs/runtime.md, "A stalled XLA call"). A requeued job
    may start again 10 s after it was requeued (``cred_expire``; Slurm's default makes it 120 s)."""
    cpus = len(os.sched_getaffinity(0))
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    mem_mb = int(meminfo["MemTotal"].split()[0]) // 1024
    return f"""\
ClusterName=testcluster
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation={workdir / 'state'}
SlurmdSpoolDir={workdir / 'spool'}
SlurmctldPidFile={workdir / 'run'}/slurmctld.pid
SlurmdPidFile={workdir / 'run'}/slurmd.pid
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=300
SchedulerParameters=batch_sched_delay=0,sched_interval=1,bf_interval=1
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={max(mem_mb * 9 // 10, 100)} State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _stop(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL, the daemon's whole session (a sudo wrapper and its child alike)."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
            return


def _logs(logdir: Path) -> str:
    logs = sorted(logdir.glob("*.log"))
    return "\n".join(f"--- {p.name}:\n{_tail(p.read_text(errors='replace'), 25)}" for p in logs)


@contextlib.contextmanager
def single_node_slurm(workdir: Path, timeout_s: float = 60) -> Iterator[SlurmCluster]:
    """Runs slurmctld and slurmd (and munged if none runs) with their config and state in workdir.

    Yields {"env": {"SLURM_CONF": ...}, "partition": ...} once the node is idle; stops on exit what
    it started (a munged that was already running is left alone).
    """
    root = _root_prefix()
    if root is None:
        raise RuntimeError("running slurmd needs root or passwordless sudo")
    workdir = Path(workdir).resolve()
    for name in ("state", "spool", "log", "run"):
        (workdir / name).mkdir(parents=True, exist_ok=True)
    # slurmd names its node after the short hostname; the NodeAddr pins it to loopback so that the
    # hostname need not resolve (containers often lack it in /etc/hosts).
    host = socket.gethostname().split(".")[0]
    conf = workdir / "slurm.conf"
    conf.write_text(_slurm_conf(workdir, host))
    env = {"SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        munged = _start_munged(root, workdir / "log" / "munged.log")
        if munged is not None:
            daemons.append(munged)
        # -c: slurmctld starts with no jobs even if workdir holds an earlier run's state.
        for daemon, extra in (("slurmctld", ["-c"]), ("slurmd", ["-N", host])):
            # In the foreground (-D) and without a LogFile, the daemons log to stderr, which also
            # catches the config errors they hit before they could open a log file.
            with (workdir / "log" / f"{daemon}.log").open("wb") as out:
                daemons.append(subprocess.Popen(
                    [*root, _which(daemon) or daemon, "-D", "-f", str(conf), *extra],
                    stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True,
                ))
        deadline, state = time.monotonic() + timeout_s, ""
        while state != "idle":
            if time.monotonic() > deadline or any(p.poll() is not None for p in daemons):
                raise RuntimeError(f"Slurm did not come up (node state {state!r}):\n{_logs(workdir / 'log')}")
            time.sleep(0.5)
            sinfo = ["sinfo", "-h", "-N", "-o", "%T", "-n", host]
            state = subprocess.run(sinfo, capture_output=True, text=True, env={**os.environ, **env}).stdout.strip()
        yield SlurmCluster(env=env, partition=PARTITION)
    finally:
        for proc in reversed(daemons):
            _stop(proc)


@pytest.fixture(scope="session")
def slurm_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running cluster, its variables exported for the session; skips only if Slurm cannot be installed."""
    reason = ensure_slurm_installed()
    if reason is not None:
        pytest.skip(f"no Slurm cluster for this test: {reason}")
    with single_node_slurm(tmp_path_factory.mktemp("slurm")) as cluster, pytest.MonkeyPatch.context() as mp:
        for key, value in cluster["env"].items():
            mp.setenv(key, value)
        yield cluster
