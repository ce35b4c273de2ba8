"""A plug-in (``BPO_PLUGINS``) for the sweep's stall tests: method ``stall_once`` is PPO whose first
update, in the first process to reach it, waits in a host callback until the process is killed, as
a compiled call that XLA:CPU has left waiting does (``bpo.infra.stall``); its later runs do not.
``STALL_MARKER`` names the file that records the first wait."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import jax

from bpo.agents.methods import register_method
from bpo.agents.ppo import PPO
from bpo.config.presets import PRESETS, register_preset

STALL_MARKER = "BPO_TEST_STALL_MARKER"


def _wait_the_first_time(_) -> None:
    marker = Path(os.environ[STALL_MARKER])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        time.sleep(3600)  # no CPU: the stall guard ends the process


class StallOnce(PPO):
    name = "stall_once"
    label = "PPO (stalls once)"

    def update(self, ctx, key, state, batch, hp, progress_remaining):
        jax.debug.callback(_wait_the_first_time, progress_remaining)
        return super().update(ctx, key, state, batch, hp, progress_remaining)


register_method(StallOnce())
register_preset(replace(
    PRESETS["cartpole_ppo"], preset="cartpole_stall_once", method="stall_once", bpo=None,
    total_timesteps=512, eval_every=256, eval_episodes=2,
    ppo=replace(PRESETS["cartpole_ppo"].ppo, n_steps=32, n_envs=8, lr_schedule="constant"),
))
