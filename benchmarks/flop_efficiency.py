"""How near the CPU's matrix rate the compiled updates run: matmul FLOPs per second of each
workload's update, beside a float32 matrix-product rate measured in the same run, on one core.

FLOPs are counted from the update's jaxpr: 2·M·N·K (times the batch) for every ``dot_general``,
scan bodies multiplied by their length, the larger branch of every ``cond``. Matrix products are
where the arithmetic of these networks is; elementwise work (layer norm, Adam, activations) is
not counted, so the figure is the rate of useful matrix arithmetic, comparable with the
matrix-product rate. (XLA's own cost analysis counts a while or scan body once, whatever its
trip count, so it cannot be used for these loops.)

Workloads, each timed as the median of several calls after a warm-up, on one core
(``os.sched_setaffinity`` before JAX starts, so every thread it makes inherits it):

* HalfCheetah-v5 ``mujoco_default`` PPO update and BPO (c̄ = 1.0, ρ̄ = 1.5) update, one seed, a
  2,048-step rollout (the host runner's per-rollout call; random rollout data);
* Figure 2's behaviour step: one BPO-REINFORCE behaviour step (FQE of Q and Q̂, μ) on a full
  ShortCorridor replay of 1,024 transitions, for a chunk of 10 seeds vmapped, as the Figure 2
  sweep runs it;
* CartPole ``cartpole_ppo`` BPO update, one seed.

    python benchmarks/flop_efficiency.py [--core 0] [--repeats 5] [--matmul 512 1024] [--fig2-chunk 10]
    python benchmarks/flop_efficiency.py --only "Figure 2" --fig2-chunk 1 2 4 10 20 50 100   # seeds per chunk
    python benchmarks/flop_efficiency.py --only "BPO (1.0" --kernels   # + the kernels XLA runs per call

``--kernels`` profiles one more call of each workload with XLA's profiler and counts the kernels it
ran (thunks: fusions, matrix products, copies, sorts; not the loops that contain them) and the
profiled time in matrix products and in everything else: where a small network's update spends the
time that is not arithmetic.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import statistics
import sys
import tempfile
import time

# One core, before JAX or anything else starts a thread: threads inherit the affinity they are born with.
CORE = int(sys.argv[sys.argv.index("--core") + 1]) if "--core" in sys.argv else 0
os.sched_setaffinity(0, {CORE})

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.extend import core as jcore  # noqa: E402

try:  # bpo in folders by kind
    from bpo.agents.learner import keyed_update, make_learner
    from bpo.config.presets import apply_variant, get_preset
    from bpo.config.schema import replace, traced_hyperparams, with_bpo
    from bpo.core.distributions import logits_dist
    from bpo.core.replay import add, init_replay
except ImportError:  # an older commit's flat bpo/, measured by update_speed.py with these helpers
    from bpo.config import replace, traced_hyperparams
    from bpo.distributions import logits_dist
    from bpo.learner import keyed_update, make_learner
    from bpo.presets import apply_variant, get_preset
    from bpo.replay import add, init_replay

    def with_bpo(cfg, on):  # before the bpo section was optional, ``algo`` said it
        return replace(cfg, algo="bpo" if on else cfg.method)
from bpo.runners.episodic import make_program  # noqa: E402
from envs.gymnasium_envs import gym_spec  # noqa: E402

FIG2_SEEDS = 10  # seeds per vmapped chunk, as Figure 2 runs on a CPU (the default CPU seed chunk)


def _dot_flops(eqn) -> float:
    (lhs_contract, _), (lhs_batch, _) = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    k = np.prod([lhs[d] for d in lhs_contract]) if lhs_contract else 1
    return 2.0 * float(np.prod(eqn.outvars[0].aval.shape)) * float(k)


def _jaxpr_flops(jaxpr) -> float:
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            total += _dot_flops(eqn)
        elif name == "scan":
            total += eqn.params["length"] * _jaxpr_flops(eqn.params["jaxpr"].jaxpr)
        elif name == "cond":
            total += max(_jaxpr_flops(b.jaxpr) for b in eqn.params["branches"])
        elif name == "while":
            total += _jaxpr_flops(eqn.params["body_jaxpr"].jaxpr)  # one trip: none of the timed updates has one
        else:
            for value in eqn.params.values():
                for sub in value if isinstance(value, (list, tuple)) else (value,):
                    if isinstance(sub, jcore.ClosedJaxpr):
                        total += _jaxpr_flops(sub.jaxpr)
                    elif isinstance(sub, jcore.Jaxpr):
                        total += _jaxpr_flops(sub)
    return total


def matmul_flops(fn, *args) -> float:
    """Matrix-product FLOPs of one call of ``fn`` (module docstring)."""
    return _jaxpr_flops(jax.make_jaxpr(fn)(*args).jaxpr)


def host_update(preset: str, env_id: str, variant: str):
    """The host runner's per-rollout learner update of one seed, on random rollout data, with the
    replay already full (BPO)."""
    cfg = get_preset(preset, env_id)
    cfg = with_bpo(cfg, True) if variant == "bpo" else apply_variant(cfg, variant)  # bpo: the preset's own
    learner, spec, hp = make_learner(cfg, gym_spec(env_id)), gym_spec(env_id), traced_hyperparams(cfg)
    T, E = cfg.ppo.n_steps, cfg.ppo.n_envs
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(T, E, spec.obs_dim)).astype(np.float32)
    action = (rng.integers(0, spec.n_actions, (T, E)) if spec.discrete
              else rng.uniform(-1, 1, (T, E, spec.n_actions))).astype(np.int32 if spec.discrete else np.float32)
    zeros = np.zeros((T, E), np.float32)
    rows = {"obs": obs, "raw_obs": obs, "action": action, "log_prob": zeros - 1.0, "reward": rng.normal(size=(T, E))
            .astype(np.float32), "terminated": zeros, "truncated": zeros, "next_obs": obs, "raw_next_obs": obs}
    key = jax.random.PRNGKey(0)
    state = learner.init(tuple(jax.random.split(key, 3)), hp, jnp.asarray(obs[0]))
    update = jax.jit(lambda s, k, r: keyed_update(learner, s, k, r, hp))
    for _ in range(cfg.bpo.replay_size // (T * E) + 1 if cfg.algo == "bpo" else 1):
        key, state, _ = update(state, key, rows)
    return (lambda s, k, r: keyed_update(learner, s, k, r, hp)), (state, key, rows)


def figure2_behaviour_step():
    """One behaviour step of BPO-REINFORCE on a full replay, for a chunk of seeds vmapped."""
    cfg = get_preset("short_corridor")
    parts, hp = make_program(cfg), traced_hyperparams(cfg)
    _, obs0 = parts.env.reset(jax.random.PRNGKey(0))
    n = cfg.bpo.replay_size
    rng = np.random.default_rng(0)
    obs = np.ones((n, 1), np.float32)  # ShortCorridor's states all look alike
    terminated = (rng.uniform(size=n) < 0.05).astype(np.float32)
    transitions = {"obs": obs, "action": rng.integers(0, 2, n).astype(np.int32), "reward": np.full(n, -1.0, np.float32),
                   "terminated": terminated, "truncated": np.zeros(n, np.float32), "next_obs": obs,
                   "log_mu": np.full(n, np.log(0.5), np.float32)}
    example = {k: jnp.asarray(v[0]) for k, v in transitions.items()}
    replay = add(init_replay(example, n), transitions, np.ones(n, bool))

    def init(key):
        mu_params = parts.mu_net.init(key, obs0)
        return parts.behaviour.init(key, obs0, jnp.int32(0), mu_params, hp), parts.policy.init(key, obs0)

    def step(bstates, pi_params, keys):
        def single(bstate, params, key):
            return parts.behaviour.step(key, bstate, replay, lambda o: logits_dist(parts.policy.apply(params, o)), hp)

        return jax.vmap(single)(bstates, pi_params, keys)

    keys = jax.random.split(jax.random.PRNGKey(1), FIG2_SEEDS)
    bstates, pi_params = jax.vmap(init)(keys)
    return step, (bstates, pi_params, keys)


WORKLOADS = {
    "HalfCheetah-v5 mujoco_default PPO update (1 seed, 2,048 steps)":
        lambda: host_update("mujoco_default", "HalfCheetah-v5", "ppo"),
    "HalfCheetah-v5 mujoco_default BPO (1.0, 1.5) update (1 seed, 2,048 steps)":
        lambda: host_update("mujoco_default", "HalfCheetah-v5", "bpo_c1.0_rho1.5"),
    f"Figure 2 BPO-REINFORCE behaviour step ({FIG2_SEEDS} seeds vmapped)": figure2_behaviour_step,
    "CartPole cartpole_ppo BPO update (1 seed, 256 steps)": lambda: host_update("cartpole_ppo", "CartPole-v1", "bpo"),
}


def timed(call, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up call."""
    jax.block_until_ready(call())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


CONTAINERS = ("while", "PjitFunction", "ThunkExecutor", "CommonPjRt", "end:", "$")
MATRIX_KERNELS = ("dot", "ynn_fusion")  # XLA's Eigen dots and its YNNPACK matrix-product fusions


def kernel_counts(call) -> dict:
    """One profiled call: kernels run and profiled milliseconds, for matrix products and for the rest."""
    counts, ms = collections.Counter(), collections.Counter()
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            jax.block_until_ready(call())
        (path,) = glob.glob(f"{trace_dir}/**/*.trace.json.gz", recursive=True)
        trace = json.load(gzip.open(path))
    for event in trace["traceEvents"] if isinstance(trace, dict) else trace:
        name = event.get("name", "")
        if event.get("ph") != "X" or name.startswith(CONTAINERS):
            continue
        kind = "matrix" if name.startswith(MATRIX_KERNELS) else "other"
        counts[kind] += 1
        ms[kind] += event.get("dur", 0) / 1e3
    return {"kernels": counts["matrix"] + counts["other"], "matrix": counts["matrix"], "matrix_ms": ms["matrix"],
            "other": counts["other"], "other_ms": ms["other"]}


def main() -> None:
    global FIG2_SEEDS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--core", type=int, default=0, help="the core to run on (read before JAX starts)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--matmul", nargs="+", type=int, default=[256, 1024])
    parser.add_argument("--fig2-chunk", nargs="+", type=int, default=[FIG2_SEEDS],
                        help="seeds vmapped together in the Figure 2 workload (one row per value)")
    parser.add_argument("--only", default="", help="run only the workloads whose name contains this text")
    parser.add_argument("--kernels", action="store_true",
                        help="also count the kernels XLA runs in one profiled call of each workload")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, core {CORE} only "
          f"(affinity {sorted(os.sched_getaffinity(0))})")
    rates = {}
    for n in args.matmul:
        a = jax.random.normal(jax.random.PRNGKey(0), (n, n))
        f = jax.jit(lambda x, y: x @ y).lower(a, a).compile()
        seconds = timed(lambda f=f, a=a: f(a, a), args.repeats)
        rates[n] = 2 * n**3 / seconds
        print(f"float32 matrix product {n}x{n}: {rates[n] / 1e9:.1f} GFLOP/s")
    peak = max(rates.values())
    print("| workload | matmul GFLOP per call | ms per call | GFLOP/s | / matrix-product rate |")
    print("| --- | --- | --- | --- | --- |")
    workloads = [(name, build, None) for name, build in WORKLOADS.items() if "Figure 2" not in name]
    workloads[2:2] = [(f"Figure 2 BPO-REINFORCE behaviour step ({n} seeds vmapped)", figure2_behaviour_step, n)
                      for n in args.fig2_chunk]
    for name, build, chunk in workloads:
        if args.only not in name:
            continue
        FIG2_SEEDS = chunk or FIG2_SEEDS
        fn, call_args = build()
        flops = matmul_flops(fn, *call_args)
        compiled = jax.jit(fn).lower(*call_args).compile()
        seconds = timed(lambda compiled=compiled, call_args=call_args: compiled(*call_args), args.repeats)
        rate = flops / seconds
        print(f"| {name} | {flops / 1e9:.2f} | {seconds * 1e3:.1f} | {rate / 1e9:.1f} | {rate / peak:.2f} |",
              flush=True)
        if args.kernels:
            k = kernel_counts(lambda compiled=compiled, call_args=call_args: compiled(*call_args))
            print(f"  kernels per call: {k['kernels']:,} ({k['matrix']:,} matrix products, {k['matrix_ms']:.0f} ms "
                  f"profiled; {k['other']:,} others, {k['other_ms']:.0f} ms profiled)", flush=True)


if __name__ == "__main__":
    main()
