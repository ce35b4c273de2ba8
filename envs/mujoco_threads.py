"""Gymnasium's MuJoCo v5 tasks stepped by MuJoCo itself on a host thread pool, inside jitted programs.

``--backend threads``: the physics is the exact MuJoCo that Gymnasium runs (its XML, frame skip,
float64, warm starts), the learning is JAX on the default device. ``ThreadedMujocoEnv`` offers the
functional interface of ``envs.functional``; its ``step_env``, ``reset`` and ``auto_reset_step``
are one ``jax.pure_callback`` each, so a vmapped rollout scan (seeds x rows x environments) makes
one host call per lockstep step for all its lanes, and ``PhysicsPool`` steps those lanes across a
thread pool (MuJoCo releases the GIL while it steps).

Why not ``mujoco.rollout``: it returns the physics state but not the solver's warm start, so a
state carried from one call to the next would not continue the way Gymnasium's ``MjData`` does.
Here each lane's state is MuJoCo's ``mjSTATE_INTEGRATION`` vector (everything ``mj_step`` reads:
time, qpos, qvel, act, ctrl, applied forces, warm start), restored into a thread's ``MjData``
before its step and read back after, plus the position the next reward differentiates (Ant's
torso ``xpos``, which lags qpos by one substep in Gymnasium). The state is float64; JAX carries
its bits as uint32 pairs (``float64`` would need ``jax_enable_x64``), so checkpoints hold it exactly
and the host is stateless: resumes and any number of threads give identical results.

Per step, as Gymnasium's ``MujocoEnv.step`` and the task's ``step`` do:

    x_before = carried position; data.ctrl = action; mj_step x frame_skip; mj_rnePostConstraint
    (Ant only: it fills in the contact forces that Ant's observation reads and nothing else's)
    observation, reward, terminated from the task (float64, the returned ones cast to float32)
    truncated once the episode has 1000 steps (TimeLimit, counted in JAX)

and per reset: ``mj_resetData``, qpos and qvel (the task's reset noise, drawn in JAX), ``mj_forward``.
``tests/test_mujoco_threads.py`` checks observations, rewards, terminations and truncations
bit-identical to Gymnasium's over 1,000 random-action steps with resets for the four tasks.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from envs.functional import EnvSpec, Step
from envs.locomotion import MAX_EPISODE_STEPS, Readout, get_task, gymnasium_asset, reset_noise
from envs.mujoco_log import quiet_deprecations

STATE_SPEC = mujoco.mjtState.mjSTATE_INTEGRATION
MIN_LANES_PER_TASK = 8  # fewer lanes per thread cost more in hand-offs than they save in stepping


# The host side: a stateless pool that steps lanes of flattened states -------------------------------
class PhysicsPool:
    """Steps and resets batches of lanes of one task across ``threads`` host threads, each with
    its own ``MjData`` (thread-local, so concurrent callers never share one)."""

    def __init__(self, env_id: str, threads: int = 0):
        self.task = get_task(env_id, "threaded")
        quiet_deprecations()
        self.model = mujoco.MjModel.from_xml_path(gymnasium_asset(self.task.xml_file))
        self.frame_skip = self.task.frame_skip
        self.dt = self.model.opt.timestep * self.frame_skip
        self.n_state = mujoco.mj_stateSize(self.model, STATE_SPEC)
        self.n_contact = 6 * self.model.nbody if self.task.needs_contact_forces else 0
        self.threads = threads or os.cpu_count() or 1
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=f"mujoco-{env_id}")
        self._local = threading.local()
        self._spawn_workers()

    def _spawn_workers(self) -> None:
        """Start every worker now, from this (Python) thread, not lazily from a callback: a thread
        inherits its creator's floating-point environment, and XLA's threads may flush denormals
        to zero, which Gymnasium's thread does not."""
        barrier, started = threading.Barrier(self.threads), []
        try:
            for _ in range(self.threads):
                started.append(self._pool.submit(barrier.wait))
        except RuntimeError as e:  # the system would not start another thread: release those waiting
            barrier.abort()
            self._pool.shutdown(wait=True)
            raise ValueError(f"physics_threads: only {len(started)} of {self.threads} threads could start ({e}); "
                             "allowed: fewer") from None
        for f in started:
            f.result()

    def _data(self) -> mujoco.MjData:
        data = getattr(self._local, "data", None)
        if data is None:
            data = self._local.data = mujoco.MjData(self.model)
        return data

    def _map(self, fn, n: int) -> None:
        """``fn(lo, hi)`` over contiguous chunks of ``n`` lanes on the pool's threads. Never in the
        calling thread: the callback runs on one of XLA's worker threads, whose stack is too small
        for MuJoCo (a segmentation fault in ``mj_forward``)."""
        chunks = min(self.threads, max(1, n // MIN_LANES_PER_TASK))
        bounds = np.linspace(0, n, chunks + 1).astype(int)
        for f in [self._pool.submit(fn, lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]:
            f.result()

    def _read(self, data, i: int, state, position, contact) -> None:
        mujoco.mj_getState(self.model, data, state[i, :-1], STATE_SPEC)
        position[i] = state[i, -1] = self.task.position(data)
        if self.n_contact:
            contact[i] = np.clip(data.cfrc_ext, *self.task.contact_force_range).ravel()

    def _readout(self, state, contact) -> Readout:
        nq, nv = self.model.nq, self.model.nv
        return Readout(state[:, 1:1 + nq], state[:, 1 + nq:1 + nq + nv], contact)

    def reset(self, qpos: np.ndarray, qvel: np.ndarray) -> tuple[np.ndarray, Readout]:
        """Fresh episodes at (qpos, qvel) [lanes, nq/nv] (any float type, set as float64): states
        [lanes, n_state + 1] and readouts."""
        n = len(qpos)
        state = np.empty((n, self.n_state + 1))
        position, contact = np.empty(n), np.empty((n, self.n_contact))

        def run(lo, hi):
            data = self._data()
            for i in range(lo, hi):
                mujoco.mj_resetData(self.model, data)
                data.qpos[:], data.qvel[:] = qpos[i], qvel[i]
                mujoco.mj_forward(self.model, data)
                self._read(data, i, state, position, contact)

        self._map(run, n)
        return state, self._readout(state, contact)

    def step(self, state: np.ndarray, action: np.ndarray):
        """One environment step of every lane: new states, readouts and x velocities."""
        n = len(state)
        new = np.empty_like(state)
        position, contact = np.empty(n), np.empty((n, self.n_contact))

        def run(lo, hi):
            data = self._data()
            for i in range(lo, hi):
                mujoco.mj_setState(self.model, data, state[i, :-1], STATE_SPEC)
                data.ctrl[:] = action[i]
                mujoco.mj_step(self.model, data, nstep=self.frame_skip)
                if self.n_contact:
                    mujoco.mj_rnePostConstraint(self.model, data)
                self._read(data, i, new, position, contact)

        self._map(run, n)
        return new, self._readout(new, contact), (position - state[:, -1]) / self.dt

    def transition(self, state: np.ndarray, action: np.ndarray):
        """``step`` with the task: new states, observations, rewards, terminations."""
        new, readout, velocity = self.step(state, action)
        reward, terminated = self.task.reward_and_termination(readout, velocity, action, np)
        return new, self.task.observation(readout, np), reward, terminated


# The JAX side ------------------------------------------------------------------------------------------
class ThreadedState(NamedTuple):
    bits: jnp.ndarray  # uint32 [2 * (n_state + 1)]: the float64 MuJoCo state and position
    t: jnp.ndarray  # steps taken in this episode (Gymnasium's TimeLimit counter)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, np.float64).view(np.uint32)


def _floats(bits: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(bits, np.uint32).view(np.float64)


class ThreadedMujocoEnv:
    """A MuJoCo v5 task behind ``envs.functional``'s interface, stepped by a ``PhysicsPool``."""

    def __init__(self, env_id: str, threads: int = 0):
        self.pool = PhysicsPool(env_id, threads)  # refuses an unknown task first
        m = self.pool.model
        self.task = self.pool.task
        self._qpos0 = jnp.asarray(m.qpos0, jnp.float32)
        obs_dim = int(self.task.observation(self.pool.reset(m.qpos0[None], np.zeros((1, m.nv)))[1], np).shape[1])
        low, high = m.actuator_ctrlrange.T
        self.spec = EnvSpec(obs_dim, False, int(m.nu), tuple(float(x) for x in low), tuple(float(x) for x in high),
                            MAX_EPISODE_STEPS)
        self._n_bits = 2 * (self.pool.n_state + 1)

    def _shapes(self, *fields):
        sizes = {"bits": ((self._n_bits,), jnp.uint32), "obs": ((self.spec.obs_dim,), jnp.float32),
                 "reward": ((), jnp.float32), "terminated": ((), jnp.bool_)}
        return tuple(jax.ShapeDtypeStruct(*sizes[f]) for f in fields)

    def _host_reset(self, qpos, qvel):
        qpos, qvel = np.asarray(qpos), np.asarray(qvel)  # see _host_step
        lead = qpos.shape[:-1]
        state, readout = self.pool.reset(qpos.reshape(-1, qpos.shape[-1]), qvel.reshape(-1, qvel.shape[-1]))
        obs = self.task.observation(readout, np).astype(np.float32)
        return _bits(state).reshape(lead + (-1,)), obs.reshape(lead + (-1,))

    def _host_step(self, bits, action, qpos=None, qvel=None, truncate=None):
        """Every lane's step; with ``truncate``, lanes whose episode ends are reset at (qpos, qvel)
        and their reset observation returned beside the final one (``envs.functional.Step``)."""
        # The callback gets jax.Arrays: indexing one per lane would dispatch a JAX operation each
        # time (5x the whole step's cost at 10 lanes); numpy views of the same buffers cost nothing.
        bits, action = np.asarray(bits), np.asarray(action)
        if truncate is not None:
            qpos, qvel, truncate = np.asarray(qpos), np.asarray(qvel), np.asarray(truncate)
        lead = bits.shape[:-1]
        state = _floats(bits.reshape(-1, bits.shape[-1]))
        new, final_obs, reward, terminated = self.pool.transition(state, action.reshape(-1, action.shape[-1]))
        final_obs = final_obs.astype(np.float32)
        out = [new, final_obs, reward.astype(np.float32), terminated]
        if truncate is not None:
            done = np.flatnonzero(terminated | truncate.reshape(-1))
            obs = final_obs.copy()
            if len(done):
                flat = (qpos.reshape(-1, qpos.shape[-1]), qvel.reshape(-1, qvel.shape[-1]))
                reset, readout = self.pool.reset(flat[0][done], flat[1][done])
                new[done], obs[done] = reset, self.task.observation(readout, np)
            out.insert(1, obs)
        out[0] = _bits(new)
        return tuple(x.reshape(lead + x.shape[1:]) for x in out)

    def reset(self, key):
        qpos, qvel = self._reset_noise(key)
        bits, obs = jax.pure_callback(self._host_reset, self._shapes("bits", "obs"), qpos, qvel,
                                      vmap_method="broadcast_all")
        return ThreadedState(bits, jnp.zeros((), jnp.int32)), obs

    def step_env(self, key, state: ThreadedState, action):
        del key  # the dynamics are deterministic
        bits, obs, reward, terminated = jax.pure_callback(
            self._host_step, self._shapes("bits", "obs", "reward", "terminated"), state.bits,
            action.astype(jnp.float32), vmap_method="broadcast_all")
        t = state.t + 1
        return ThreadedState(bits, t), obs, reward, terminated, t >= MAX_EPISODE_STEPS

    def auto_reset_step(self, key, state: ThreadedState, action) -> Step:
        """``envs.functional.auto_reset_step`` in one host call: the step, and a reset only for the
        lanes whose episode ends (the generic one would reset every lane at every step)."""
        qpos, qvel = self._reset_noise(jax.random.split(key)[1])
        truncate = state.t + 1 >= MAX_EPISODE_STEPS
        bits, obs, final_obs, reward, terminated = jax.pure_callback(
            self._host_step, self._shapes("bits", "obs", "obs", "reward", "terminated"), state.bits,
            action.astype(jnp.float32), qpos, qvel, truncate, vmap_method="broadcast_all")
        done = terminated | truncate
        t = jnp.where(done, 0, state.t + 1)
        return Step(ThreadedState(bits, t), obs, reward, terminated, truncate & ~terminated, final_obs)

    def _reset_noise(self, key):
        return reset_noise(key, self._qpos0, self.pool.model.nv, self.task.reset_noise_scale, self.task.qvel_noise)


def make_threaded_env(env_id: str, threads: int = 0) -> ThreadedMujocoEnv:
    return ThreadedMujocoEnv(env_id, threads)


__all__ = ["PhysicsPool", "ThreadedMujocoEnv", "ThreadedState", "make_threaded_env"]
