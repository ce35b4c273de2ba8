"""MuJoCo's deprecation warning about Gymnasium's own task files is dropped; every other MuJoCo
warning still reaches stderr, and nothing writes MUJOCO_LOG.TXT (a real process, real warnings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import mujoco, numpy as np
from envs.gymnasium_envs import gym_spec
gym_spec("HalfCheetah-v5")  # compiles Gymnasium's XML, which uses settotalmass
model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><body><joint/><geom size='1'/></body></worldbody></mujoco>")
data = mujoco.MjData(model)
data.qpos[0] = np.nan
mujoco.mj_step(model, data)  # MuJoCo warns of the bad state
"""


@pytest.mark.mujoco
def test_gymnasium_s_deprecation_is_dropped_and_other_warnings_kept(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}  # run from tmp_path: its log would land there
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert "settotalmass" not in proc.stderr
    assert "MuJoCo warning: Nan, Inf or huge value in QPOS" in proc.stderr, proc.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
