"""Speed of PPO and BPO-PPO on the cartpole_ppo preset, 1 seed and N vmapped seeds, and rejax's
PPO on the same settings in the same process (a benchmark-only dependency: ``pip install rejax``).

    python benchmarks/classic_control_speed.py [--seeds 10] [--skip-rejax]

Prints compile time (tracing + XLA), run time and environment steps per second. End to end is
compile + run. The preset rows are what `bpo train` does (first execution); the PPO comparison
rows report the median of ``--repeats`` executions of each compiled program. rejax's evaluation
(128 episodes at the start and the end) is inside its timed run; ours evaluates 10 episodes at
the start and the end. Nothing here is asserted; the figures go in issue notes and the README.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

from bpo.config.presets import get_preset
from bpo.config.schema import replace, traced_hyperparams, with_bpo
from bpo.runners.seeds import seed_keys
from bpo.training import make_train, run


def timed(compiled, *args, repeats: int):
    """Median wall time of ``repeats`` executions of a compiled program, and its last output."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def ours(algo: str, seeds: int, eval_at_end_only: bool, repeats: int = 1):
    cfg = replace(with_bpo(get_preset("cartpole_ppo"), algo == "bpo"), seeds=seeds)
    if eval_at_end_only:
        cfg = replace(cfg, eval_every=cfg.total_timesteps)
    if repeats == 1:  # exactly what `bpo train` does, first execution included
        out = run(cfg)
        steps = seeds * float(out.metrics["eval"]["eval_step"][0, -1])
        final = float(out.metrics["eval"]["eval_return"][:, -1].mean())
        return out.compile_time_s, out.run_time_s, steps, final
    start = time.perf_counter()
    train = make_train(cfg)
    keys, hp = seed_keys(cfg.seed, seeds), traced_hyperparams(cfg)
    if seeds == 1:
        program = jax.jit(lambda k, h: jax.lax.map(lambda key: train(key, h), k))
    else:
        program = jax.jit(jax.vmap(train, in_axes=(0, None)))
    compiled = program.lower(keys, hp).compile()
    compile_s = time.perf_counter() - start
    run_s, out = timed(compiled, keys, hp, repeats=repeats)
    steps = seeds * float(out["eval"]["eval_step"][0, -1])
    return compile_s, run_s, steps, float(out["eval"]["eval_return"][:, -1].mean())


class FiveTupleGymnax:
    """gymnax >= 1.0 steps return (obs, state, reward, terminated, truncated, info); rejax 0.1.3
    expects the older (obs, state, reward, done, info). This adapter only merges the two flags."""

    def __init__(self, env_id: str):
        import gymnax

        self._env, self.default_params = gymnax.make(env_id)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_env", "default_params"):  # deepcopy probes before __init__ ran
            raise AttributeError(name)
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, terminated | truncated, info

    def reset(self, key, params=None):
        return self._env.reset(key, params)


def rejax_ppo(seeds: int, repeats: int = 1):
    from rejax import PPO

    preset = get_preset("cartpole_ppo")
    p = preset.ppo
    algo = PPO.create(
        env=FiveTupleGymnax("CartPole-v1"), num_envs=p.n_envs, num_steps=p.n_steps,
        num_minibatches=p.n_steps * p.n_envs // p.batch_size,
        num_epochs=p.n_epochs, total_timesteps=preset.total_timesteps, eval_freq=preset.total_timesteps,
        learning_rate=p.learning_rate, max_grad_norm=p.max_grad_norm, gamma=p.gamma, gae_lambda=p.gae_lambda,
        clip_eps=p.clip_range, vf_coef=p.vf_coef, ent_coef=p.ent_coef,
        agent_kwargs={"activation": p.activation, "hidden_layer_sizes": p.pi_hidden},
    )
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(algo.train)).lower(keys).compile()
    compile_s = time.perf_counter() - start
    run_s, (_, evaluation) = timed(compiled, keys, repeats=repeats)
    returns = evaluation[1] if isinstance(evaluation, tuple) else evaluation
    final = float(jax.numpy.asarray(returns)[:, -1].mean())
    return compile_s, run_s, seeds * float(preset.total_timesteps), final


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="vmapped seeds of the second measurement")
    parser.add_argument("--skip-rejax", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="executions per PPO comparison program (median)")
    args = parser.parse_args()
    print(f"backend {jax.default_backend()}, devices {jax.devices()}")
    print(f"{'what':34s} {'seeds':>5s} {'compile s':>10s} {'run s':>8s} {'end-to-end s':>13s} {'steps/s':>10s}"
          f" {'final':>7s}")
    rows = {}
    for seeds in (1, args.seeds):
        runs = [(f"ours {a} (preset evals)", lambda a=a: ours(a, seeds, False)) for a in ("ppo", "bpo")]
        # The PPO comparison: same settings, evaluation only at the start and the end, median of
        # `--repeats` executions after compiling (the first execution of a program is slower).
        runs.append(("ours ppo (one final eval)", lambda: ours("ppo", seeds, True, args.repeats)))
        if not args.skip_rejax:
            runs.append(("rejax ppo (one final eval)", lambda: rejax_ppo(seeds, args.repeats)))
        for name, fn in runs:
            compile_s, run_s, steps, final = fn()
            rows[(name, seeds)] = steps / run_s
            print(f"{name:34s} {seeds:5d} {compile_s:10.1f} {run_s:8.2f} {compile_s + run_s:13.1f} "
                  f"{steps / run_s:10.0f} {final:7.1f}")
        if not args.skip_rejax:
            ratio = rows[("ours ppo (one final eval)", seeds)] / rows[("rejax ppo (one final eval)", seeds)]
            print(f"  PPO steps/s, ours / rejax, {seeds} seed(s): {ratio:.2f}")


if __name__ == "__main__":
    main()
