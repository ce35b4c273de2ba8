"""Results reach the disk whole or are kept somewhere the user is told about (``bpo.infra.publish``): a
rewrite that fails half-way leaves the old run as it was, a run over a file-size limit (a real
``ulimit -f`` on a real process) is rescued in parts that join back to the very files an unlimited
run writes, and a sweep's run is replaced whole."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bpo.config.presets import get_preset
from bpo.infra import checkpoint as ckpt
from bpo.infra import publish, results
from bpo.training.job import Job
from experiments.cli import main

TRAIN = ["train", "cartpole_ppo", "--bpo", "--total-timesteps", "8192", "--no-progress"]


def _old_run(folder: Path) -> dict[str, bytes]:
    """A finished run directory written by the real writer, with a user's file beside it."""
    curve = [{"step": 1, "seed": 0, "eval_return": 1.0}]
    results.write_run_dir(folder, get_preset("cartpole_ppo"), curve, {"final_mean": 1.0})
    (folder / "notes.txt").write_text("mine")
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_rewrite_that_fails_half_way_leaves_the_old_run_as_it_was(tmp_path):
    out = tmp_path / "run"
    before = _old_run(out)

    def half(folder: Path) -> None:
        results.atomic_write_json(folder / "config.json", {"new": True})
        results.atomic_write_text(folder / "curve.csv", "step,seed,eval_return\n")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        publish.publish_run_dir(out, half)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging or trash left behind


def test_a_rewrite_replaces_the_run_files_and_keeps_the_others(tmp_path):
    out = tmp_path / "run"
    _old_run(out)
    (out / "tb").mkdir()
    (out / "tb" / "events").write_text("e")

    def new(folder: Path) -> str:
        results.atomic_write_json(folder / "config.json", {"new": True})
        results.atomic_write_json(folder / "summary.json", {"final_mean": 2.0})
        return "done"

    assert publish.publish_run_dir(out, new) == "done"
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "notes.txt", "summary.json", "tb"]
    assert json.loads((out / "summary.json").read_text()) == {"final_mean": 2.0}  # no old curve.csv beside it
    assert (out / "tb" / "events").read_text() == "e"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


KILLED_AT = """
import os, shutil, signal, sys
from pathlib import Path
from bpo.infra import publish, results

moment, out = sys.argv[1], Path(sys.argv[2])
print(os.getpid(), flush=True)
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
if moment == "before the swap":
    publish._exchange = die
elif moment == "after the swap":  # before the old folder (now where the new one was) is removed
    exchange = publish._exchange
    def swap_then_die_at_the_next_removal(a, b):
        assert exchange(a, b)  # this machine's file system can swap in one step
        publish.shutil.rmtree = die
        return True
    publish._exchange = swap_then_die_at_the_next_removal
publish.publish_run_dir(out, lambda folder: results.atomic_write_json(folder / "summary.json", {"final_mean": 2.0}))
"""


@pytest.mark.parametrize("moment", ["before the swap", "after the swap"])
def test_a_process_killed_while_it_replaces_a_run_leaves_the_old_run_or_the_new_one(tmp_path, moment):
    """SIGKILL (a real one, of a real process) just before or just after the old run folder and the
    new one are swapped: the folder holds the old run or the new one, the user's files (and a run's
    checkpoint) with it; it was absent between two renames, and `bpo train --resume` found no
    checkpoint (adversarial audit, session 61)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    if not publish._exchange(a, b):
        pytest.skip("this file system cannot swap two folders in one step: the two renames are used")
    out = tmp_path / "run"
    before = _old_run(out)
    (out / "checkpoint").mkdir()
    (out / "checkpoint" / "checkpoint.msgpack").write_bytes(b"state")
    proc = subprocess.run([sys.executable, "-c", KILLED_AT, moment, str(out)], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert files == (before if moment == "before the swap" else
                     {"summary.json": b'{\n  "final_mean": 2.0\n}\n', "notes.txt": b"mine"})
    assert (out / "checkpoint" / "checkpoint.msgpack").read_bytes() == b"state"
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.")]
    host, killed = publish._tag().rsplit(".", 1)[0], proc.stdout.decode().strip()
    assert len(left) == 1 and left[0].endswith(f".staging.{host}.{killed}")
    publish.publish_run_dir(out, lambda folder: results.atomic_write_json(folder / "summary.json", {"final_mean": 3}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "run"]  # the killed publisher's leftover too


def test_only_leftovers_of_dead_publishers_of_the_same_folder_on_this_host_are_removed(tmp_path):
    """A staging or trash sibling is removed by the next publish of its folder only where the
    process that made it is gone: a publish under way (a live process), another host's (its
    process cannot be checked from here) and another folder's are kept (left alone, session 61)."""
    out = tmp_path / "run"
    _old_run(out)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    host = publish._tag().rsplit(".", 1)[0]
    names = {"dead staging": f".run.staging.{host}.{dead.stdout.strip()}",
             "dead trash": f".run.replaced.{host}.{dead.stdout.strip()}",
             "live": f".run.staging.{host}.{live.pid}", "other host": f".run.staging.not-{host}.{live.pid}",
             "other folder": f".runs.staging.{host}.{dead.stdout.strip()}"}
    try:
        for name in names.values():
            (tmp_path / name).mkdir()
            (tmp_path / name / "summary.json").write_text("{}")
        assert publish.clear_leftovers(out) == sorted([names["dead staging"], names["dead trash"]])
        kept = {"run"} | {names[k] for k in ("live", "other host", "other folder")}
        assert {p.name for p in tmp_path.iterdir()} == kept
    finally:
        live.kill()
        live.wait()


def test_a_file_where_the_folder_was_is_not_replaced(tmp_path):
    out = tmp_path / "run"
    out.write_text("a user's file")
    with pytest.raises(NotADirectoryError):
        publish.publish_run_dir(out, lambda folder: results.atomic_write_json(folder / "summary.json", {}))
    assert out.read_text() == "a user's file"


def test_rescue_places_prefer_other_file_systems(tmp_path, monkeypatch):
    monkeypatch.setenv(publish.RESCUE_ENV, str(tmp_path / "mine"))
    places = publish.rescue_candidates(tmp_path / "run")
    assert places[0] == (tmp_path / "mine").absolute()  # the user's choice first
    places = places[1:]
    if Path("/dev/shm").is_dir() and os.stat("/dev/shm").st_dev != os.stat(tmp_path).st_dev:
        same = [p for p in places if p.exists() and os.stat(p).st_dev == os.stat(tmp_path).st_dev]
        assert places.index(Path("/dev/shm")) < min((places.index(p) for p in same), default=len(places))


@pytest.mark.parametrize(("name", "value", "allowed"), [
    ("BPO_WRITE_RETRY_S", "-1", "must be a number from 0 to 3600"),
    ("BPO_WRITE_RETRIES", "soon", "must be an integer from 0 to 100"),
    ("BPO_STALL_MINUTES", "ten", "must be a number of minutes from 0 to 10080"),
    ("BPO_THREADS", "0", "must be an integer from 1 to 1024"),
    # Infinite or absurd settings that once passed the check and broke the write after the work.
    ("BPO_WRITE_RETRY_S", "inf", "must be a number from 0 to 3600, got 'inf'"),
    ("BPO_WRITE_RETRIES", "inf", "must be an integer from 0 to 100, got 'inf'"),
    ("BPO_WRITE_RETRIES", "2.5", "must be an integer from 0 to 100"),
    ("BPO_STALL_MINUTES", "inf", "must be a number of minutes from 0 to 10080"),
    ("BPO_STALL_MINUTES", "nan", "must be a number of minutes from 0 to 10080"),
    ("BPO_THREADS", "\u00b2", "must be an integer from 1 to 1024, got '\u00b2'"),
    ("BPO_THREADS", "100000", "must be an integer from 1 to 1024"),
    ("BPO_CPU_ASYNC_DISPATCH", "true", "must be 0 or 1, got 'true'")])  # 'true' silently meant off
@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_bad_setting_in_the_environment_stops_the_command_before_any_work(tmp_path, monkeypatch, capsys, name,
                                                                            value, allowed, command):
    monkeypatch.setenv(name, value)
    argv = ([*TRAIN, "--out", str(tmp_path / "run")] if command == "train" else
            ["sweep", "--preset", "cartpole_ppo", "--out", str(tmp_path / "run")])
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(f"error: {name}: {allowed}")
    assert not (tmp_path / "run").exists()


def test_results_over_a_file_size_limit_are_rescued_in_parts_and_the_old_run_is_kept(tmp_path):
    """A real process under ``ulimit -f``: its checkpoints do not fit (it trains on), its rewrite of a
    finished run fails at the first file over the limit; the old run stays whole, and the new
    results land in the rescue folder, the large files in parts that join to exactly what an
    unlimited run writes."""
    reference = tmp_path / "reference"
    assert main([*TRAIN, "--out", str(reference)]) == 0
    sizes = {p.name: p.stat().st_size for p in reference.iterdir()}
    blocks = sizes["config.json"] // 1024 + 1  # `ulimit -f` counts 1024-byte blocks: the config fits...
    limit = blocks * 1024
    assert sizes["train_metrics.csv"] > limit  # ...the training metrics do not
    out = tmp_path / "run"
    before = _old_run(out)
    env = {**os.environ, publish.RESCUE_ENV: str(tmp_path / "rescue"), "BPO_WRITE_RETRY_S": "0",
           "BPO_COMPILE_CACHE": ""}
    command = shlex.join([sys.executable, "-m", "experiments.cli", *TRAIN, "--out", str(out)])
    proc = subprocess.run(["bash", "-c", f"ulimit -f {blocks} && exec {command}"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    # The default checkpoints did not fit either: each was reported, and training went on.
    assert "not written" in proc.stderr and "training goes on" in proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    found = re.search(r"the results are in '([^']+)'", proc.stderr)
    assert found and "cat NAME.part* > NAME" in proc.stderr, proc.stderr
    rescued = Path(found.group(1))
    assert rescued.parent == (tmp_path / "rescue").absolute()
    for name in ("curve.csv", "train_metrics.csv"):
        parts = sorted(rescued.glob(f"{name}.part*")) or [rescued / name]
        assert all(p.stat().st_size <= limit for p in parts)
        assert b"".join(p.read_bytes() for p in parts) == (reference / name).read_bytes(), name
    assert filecmp.cmp(rescued / "config.json", reference / "config.json", shallow=False)
    summary = json.loads(b"".join(p.read_bytes() for p in sorted(rescued.glob("summary.json*"))))
    assert summary["final_eval_returns"] == json.loads((reference / "summary.json").read_text())["final_eval_returns"]


def test_a_run_folder_whose_name_fills_the_file_system_s_limit_is_written(tmp_path):
    """A real ``bpo train`` into a folder named with 250 of the 255 bytes a name may have: its
    staging and trash siblings (``.NAME.staging.HOST.PID``) would not fit, so their names shorten
    the run's name, and the run lands whole with nothing left beside it."""
    out = tmp_path / ("r" * 250)
    done = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "short_corridor", "--episodes", "20",
                           "--eval-every", "10", "--eval-episodes", "2", "--no-progress", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "summary.json").read_text())["final_eval_returns"]
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_a_run_folder_name_longer_than_the_file_system_holds_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / ("r" * (publish.name_max(tmp_path) + 1))
    assert main(["train", "short_corridor", "--episodes", "20", "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out: the folder name") and f"allowed: at most {publish.name_max(tmp_path)}" in err
    assert list(tmp_path.iterdir()) == []


def test_sibling_and_rescue_names_fit_and_stay_apart():
    a, b = "x" * 300 + "a", "x" * 300 + "b"
    names = [publish.fitted_name(".", n, ".staging.host.123", 255) for n in (a, b)]
    assert all(len(n.encode()) == 255 for n in names) and names[0] != names[1]
    assert publish.fitted_name(".", "run", ".staging.h.1", 255) == ".run.staging.h.1"  # short names as they were
    multibyte = publish.fitted_name("bpo-rescued-", "é" * 200, "-", 247)
    assert len(multibyte.encode()) <= 247 and multibyte.startswith("bpo-rescued-é")


def test_a_long_named_run_is_rescued_under_a_name_that_fits(tmp_path, monkeypatch):
    """The rescue folder is named after the run (``bpo-rescued-NAME-XXXXXXXX``): with a run name of
    250 bytes it is shortened, and the results are written there."""
    monkeypatch.setenv("BPO_RESCUE_DIR", str(tmp_path / "rescue"))
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, so no folder can be made under it")
    written, folder = publish.save_or_rescue(blocked / ("r" * 250),
                                             lambda f: (Path(f).mkdir(exist_ok=True), (Path(f) / "x").write_text("1")))
    assert folder is not None and folder.parent == tmp_path / "rescue" and (folder / "x").read_text() == "1"
    assert len(folder.name.encode()) <= 255 and folder.name.startswith("bpo-rescued-rrr")


def test_an_out_folder_named_dot_is_the_folder_it_stands_for(tmp_path):
    """``--out .`` (and a path ending in ``..``) names no folder that can be staged beside and
    renamed: the run goes to the folder it stands for, checked before the work, not after it."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "mine.txt").write_text("the user's")
    done = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "short_corridor", "--episodes", "20",
                           "--eval-every", "10", "--eval-episodes", "2", "--no-progress", "--out", "."], cwd=here,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads((here / "summary.json").read_text())["seeds"] == get_preset("short_corridor").seeds
    assert (here / "mine.txt").read_text() == "the user's" and sorted(p.name for p in tmp_path.iterdir()) == ["here"]
    assert Job(get_preset("short_corridor"), here / "sub" / "..", 0).out_dir == here


@pytest.mark.parametrize("link_home", ["beside", "another file system"], indirect=True)
def test_an_out_folder_given_as_a_symbolic_link_is_followed(tmp_path, link_home):
    """``--out LINK``: the run lands in the folder the link points to, the link stays a link, the
    target's own files stay in it, and nothing is left beside the link; on another file system too
    (the staging folder goes beside the target, so the last rename stays on one file system)."""
    base = link_home
    target = base / "target"
    target.mkdir(parents=True)
    (target / "mine.txt").write_text("the user's")
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    for seed in ("0", "1"):  # a new run, then a rewrite in place
        done = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "short_corridor", "--episodes",
                               "20", "--eval-every", "10", "--eval-episodes", "2", "--seed", seed, "--no-progress",
                               "--out", str(link)], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert link.is_symlink() and link.resolve() == target.resolve()
        assert json.loads((target / "config.json").read_text())["seed"] == int(seed)
        assert (target / "mine.txt").read_text() == "the user's"
        beside_link = ["elsewhere", "link"] if base.parent == tmp_path else ["link"]
        assert sorted(p.name for p in tmp_path.iterdir()) == beside_link
        assert sorted(p.name for p in base.iterdir()) == ["target"]


def _holds_a_lock(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds an flock on the file ``path`` (``/proc/locks``: looked at from
    outside, since taking the lock to test it could make the holder's own attempt fail)."""
    try:
        inode = os.stat(path).st_ino
    except FileNotFoundError:
        return False
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "FLOCK" in fields and str(pid) in fields and any(f.endswith(f":{inode}") for f in fields):
            return True
    return False


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_a_second_train_into_a_folder_in_use_is_refused_and_the_first_run_lands(tmp_path):
    """Two ``bpo train --out X`` at once: the second, another configuration started while the first
    (a real process) is held by SIGSTOP with its lock taken and its checkpoint written, is refused
    as in use (not told to remove the running run's checkpoint) before any work; the first lands
    whole and leaves no lock behind, and then the folder can be trained into again (adversarial
    audit: both exited 0, and one run's results were lost without a word)."""
    out = tmp_path / "cc"
    train = [sys.executable, "-m", "experiments.cli", "train", "short_corridor", "--episodes", "2000", "--eval-every",
             "50", "--eval-episodes", "2", "--checkpoint-every", "1", "--no-progress", "--out", str(out)]
    first = subprocess.Popen(train, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (_holds_a_lock(first.pid, publish.lock_path_for(out)) and ckpt.exists(out / "checkpoint")):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.02)
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = subprocess.run([*train, "--no-bpo"], capture_output=True, text=True, timeout=600)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert second.returncode == 2, second.stderr
        assert second.stderr.startswith(f"error: --out: {str(out)!r} is in use: another bpo train is writing its run "
                                        "there"), second.stderr
        _, err = first.communicate(timeout=600)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert json.loads((out / "summary.json").read_text())["algo"] == "bpo"
    assert [p.name for p in tmp_path.iterdir()] == ["cc"]  # the lock went with its holder
    again = subprocess.run([*train, "--no-bpo"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "replacing the finished run" in again.stderr, again.stderr
    assert json.loads((out / "summary.json").read_text())["algo"] == "reinforce"
