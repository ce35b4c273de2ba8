"""``bpo verify-variance``: Theorem 2 checked exactly (dynamic programming) and by Monte Carlo.

For ShortCorridor (at the optimal policy) and random MDPs: the exact variance of the IS return
(eq. 6, lambda = 1, no truncation; bpo.instruments.variance) under pi and under mu-hat (eq. 5), Theorem 2's
gap epsilon, and Monte Carlo estimates with standard errors. Two forms of the return are
reported (see bpo.instruments.variance): baseline b = 0 (PDIS, eq. 1: what Lemma 4 describes and what
BPO-REINFORCE uses) and b = v_pi (eq. 6 as printed). Optionally trains BPO-REINFORCE
(``short_corridor`` preset) and computes, at evaluation checkpoints, the exact variance under
the learned mu against pi and mu-hat of the same pi. Writes summary.json, table.json, table.md
and variance.png/pdf to ``--out``; both JSON files carry the provenance.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from bpo.agents.methods import validate
from bpo.config.presets import get_preset
from bpo.config.schema import ConfigError, replace, with_bpo
from bpo.infra.processes import end_at_once
from bpo.infra.provenance import provenance
from bpo.infra.publish import save_or_rescue
from bpo.infra.results import atomic_write_json, atomic_write_text, ensure_writable_dir
from bpo.infra.settings import validate_environment
from bpo.instruments import variance as V
from bpo.instruments.stats import describe
from bpo.training import run
from experiments.arguments import parse
from experiments.common import save_figure

Z_AGREE = 4.0  # |MC - exact| / SE below this counts as agreement
PI_STAR = float(2.0 - np.sqrt(2.0))  # ShortCorridor's optimal P(right), envs/short_corridor.py


@dataclass(frozen=True)
class VerifyVarianceArgs:
    """Check Theorem 2 (Var under mu-hat <= Var under pi) exactly and by Monte Carlo on ShortCorridor
    and random MDPs; measure the variance under BPO-REINFORCE's learned mu on ShortCorridor."""

    out: Path = Path("runs/variance")
    """Output folder (git-ignored runs/ by default; the committed results: --out results/variance)."""
    n_random: int = 20
    """Random MDPs (5 states, 3 actions, gamma 0.9, episodic) besides ShortCorridor."""
    episodes: int = 100_000
    """Monte Carlo episodes per MDP and behaviour policy."""
    seed: int = 0
    """Random MDP i is generated from seed + i; also seeds the Monte Carlo and the training runs."""
    checkpoints: tuple[int, ...] = (0, 50, 100, 200, 300)
    """Training episodes at which the learned mu is measured; multiples of the preset's eval_every (10), at
    most --train-episodes."""
    train: bool = True
    """Train BPO-REINFORCE on ShortCorridor (--no-train skips it)."""
    seeds: int = 10
    """Training runs (vmapped)."""
    train_episodes: int = 300
    """Training episodes per run (the preset's 300)."""
    max_steps: int = 10_000
    """Monte Carlo guard: episodes still running after this many steps are cut (and counted)."""


def validate_args(a: VerifyVarianceArgs, eval_every: int) -> None:
    """Raise ConfigError naming the first invalid argument and what is allowed."""
    _validate_checks(a)
    if a.train:  # the training arguments matter only when there is training
        _validate_training(a, eval_every)


def _validate_checks(a: VerifyVarianceArgs) -> None:
    """The arguments of the exact and Monte Carlo checks, which always run."""
    if not 1 <= a.n_random <= 10_000:
        raise ConfigError("n_random", f"must be an integer in [1, 10000], got {a.n_random}")
    if not 100 <= a.episodes <= 10_000_000:
        raise ConfigError("episodes", f"must be an integer in [100, 10000000], got {a.episodes}")
    if a.seed < 0:
        raise ConfigError("seed", f"must be an integer >= 0, got {a.seed}")
    if a.max_steps < 10:
        raise ConfigError("max_steps", f"must be an integer >= 10, got {a.max_steps}")


def _validate_training(a: VerifyVarianceArgs, eval_every: int) -> None:
    """The arguments of the BPO-REINFORCE training runs: the learned mu is only recorded at
    evaluations, so every checkpoint must be one of them."""
    if a.seeds < 2:
        raise ConfigError("seeds", f"must be an integer >= 2 (for a standard error), got {a.seeds}")
    if a.train_episodes < eval_every or a.train_episodes % eval_every:
        raise ConfigError("train_episodes", f"must be a positive multiple of {eval_every}, got {a.train_episodes}")
    if not a.checkpoints or len(set(a.checkpoints)) != len(a.checkpoints):
        raise ConfigError("checkpoints", f"must be distinct episode numbers, got {list(a.checkpoints)}")
    for c in a.checkpoints:
        if c < 0 or c > a.train_episodes or c % eval_every:
            raise ConfigError("checkpoints", f"must be multiples of {eval_every} in [0, {a.train_episodes}], got {c}")
    try:  # the training run's own limits (a seed within the key's range, counts within int32), before any work
        validate(training_config(a.seeds, a.train_episodes, a.seed))
    except ConfigError as e:
        field = {"episodes": "train_episodes"}.get(e.field_name, e.field_name)
        raise ConfigError(field, str(e).removeprefix(f"{e.field_name}: ")) from None


def exact_row(mdp: V.TabularMDP, pi: np.ndarray) -> dict:
    """Exact values at the start state: v_pi, Var under pi and mu-hat for b = 0 and b = v_pi, epsilon."""
    v, q = V.policy_evaluation(mdp, pi)
    qh = V.q_hat(mdp, pi, q)
    mh = V.mu_hat(pi, qh)
    var = lambda mu, b=None: V.start_variance(mdp, V.is_return_variance(mdp, pi, mu, b), v)  # noqa: E731
    row = {"v_pi": float(mdp.p0 @ v), "var_pi": var(pi), "var_mu_hat": var(mh), "var_mu_hat_eq6_vpi": var(mh, v),
           "epsilon": float(mdp.p0 @ V.theorem2_gap(mdp, pi, qh))}
    tol = 1e-9 * max(1.0, row["var_pi"])
    row["theorem2_holds"] = row["var_mu_hat"] <= row["var_pi"] + tol
    row["theorem2_holds_eq6_vpi"] = row["var_mu_hat_eq6_vpi"] <= row["var_pi"] + tol
    return row


def mc_row(mdp: V.TabularMDP, pi: np.ndarray, exact: dict, episodes: int, rng: np.random.Generator,
           max_steps: int) -> dict:
    """Monte Carlo mean and variance of G_0 for the three (behaviour, baseline) pairs of ``exact_row``,
    with z-scores against the exact values."""
    v, q = V.policy_evaluation(mdp, pi)
    mh = V.mu_hat(pi, V.q_hat(mdp, pi, q))
    row, agree = {}, True
    for key, mu, b in (("pi", pi, None), ("mu_hat", mh, None), ("mu_hat_eq6_vpi", mh, v)):
        est = V.monte_carlo(mdp, pi, mu, episodes, rng, b, max_steps)
        z_mean = (est.mean - exact["v_pi"]) / est.mean_se
        z_var = (est.var - exact[f"var_{key}"]) / est.var_se
        row[f"mc_{key}"] = {**est._asdict(), "z_mean": z_mean, "z_var": z_var}
        agree &= abs(z_mean) < Z_AGREE and abs(z_var) < Z_AGREE and est.truncated == 0
    row["mc_agrees"] = bool(agree)
    return row


def verify_mdp(mdp: V.TabularMDP, pi: np.ndarray, episodes: int, rng: np.random.Generator, max_steps: int) -> dict:
    exact = exact_row(mdp, pi)
    return {**exact, **mc_row(mdp, pi, exact, episodes, rng, max_steps)}


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    """Mean and standard error over seeds; an infinite variance makes the mean inf and the SE NaN."""
    d = describe(x, drop_non_finite=False)
    return d["mean"], d["se"]


def best_state_independent(mdp: V.TabularMDP, pi: np.ndarray, grid: int = 999) -> tuple[float, float]:
    """(P(right), Var(G_0)) of the lowest-variance behaviour policy that, like BPO's mu network on
    ShortCorridor, cannot tell cells apart; by grid search with step 1 / (grid + 1)."""
    ps = np.arange(1, grid + 1) / (grid + 1)
    var = np.array([V.is_return_variance(mdp, pi, V.state_independent(p))[0] for p in ps])
    return float(ps[np.argmin(var)]), float(np.min(var))


def learned_variances(pi_probs: np.ndarray, mu_probs: np.ndarray, eval_episode: np.ndarray,
                      checkpoints: tuple[int, ...], mdp: V.TabularMDP) -> list[dict]:
    """Per checkpoint: exact Var(G_0) (b = 0) under pi, under mu-hat of that pi, under the learned mu
    and under the best state-independent mu; mean ± SE over seeds. ``*_probs``: [seeds, evals, 2]
    action probabilities, state-independent in ShortCorridor (every cell has the same observation),
    so they define the policies exactly."""
    rows = []
    for c in checkpoints:
        idx = int(np.flatnonzero(eval_episode[0] == c)[0])
        per_seed = {"var_pi": [], "var_mu_hat": [], "var_mu_learned": [], "var_mu_best_state_independent": []}
        for p_pi, p_mu in zip(pi_probs[:, idx, 1].astype(float), mu_probs[:, idx, 1].astype(float), strict=True):
            pi, mu = V.state_independent(p_pi), V.state_independent(p_mu)
            v, q = V.policy_evaluation(mdp, pi)
            mh = V.mu_hat(pi, V.q_hat(mdp, pi, q))
            for key, m in (("var_pi", pi), ("var_mu_hat", mh), ("var_mu_learned", mu)):
                per_seed[key].append(V.start_variance(mdp, V.is_return_variance(mdp, pi, m), v))
            per_seed["var_mu_best_state_independent"].append(best_state_independent(mdp, pi)[1])
        row = {"episode": c, "p_right_pi": _mean_se(pi_probs[:, idx, 1]), "p_right_mu": _mean_se(mu_probs[:, idx, 1])}
        for key, vals in per_seed.items():
            row[key], row[key + "_se"] = _mean_se(np.array(vals))
        ratio = np.array(per_seed["var_mu_learned"]) / np.array(per_seed["var_pi"])
        row["ratio_learned_to_pi"], row["ratio_learned_to_pi_se"] = _mean_se(ratio)
        row["seeds_learned_below_pi"] = int(np.sum(ratio < 1.0 - 1e-6))  # float32 probabilities: mu = pi is ~1
        row["seeds_learned_infinite"] = int(np.sum(np.isinf(per_seed["var_mu_learned"])))
        row["seeds"] = len(ratio)
        rows.append(row)
    return rows


def training_config(seeds: int, episodes: int, seed: int):
    """The training runs' config: BPO-REINFORCE with the ``short_corridor`` preset."""
    return replace(with_bpo(get_preset("short_corridor"), True), seeds=seeds, episodes=episodes, seed=seed)


def train_short_corridor(seeds: int, episodes: int, seed: int) -> dict:
    """BPO-REINFORCE with the ``short_corridor`` preset; returns the evaluation metrics (numpy)."""
    return run(training_config(seeds, episodes, seed)).metrics["eval"]


def _fmt(x: float) -> str:
    return f"{x:.4g}" if np.isfinite(x) else str(x)


def format_table(summary: dict, learned: list[dict]) -> str:
    lines = [
        "Var(G_0) of the IS return (eq. 6, lambda = 1, no truncation) at the start state; exact (DP) and "
        f"Monte Carlo (± SE). b = 0: PDIS; b = v_pi: eq. (6) as printed. MC agrees: |z| < {Z_AGREE:g}.", "",
        "| MDP | v_pi | Var pi | MC Var pi | Var mu-hat (b=0) | MC Var mu-hat | epsilon | Thm 2 (b=0) "
        "| Var mu-hat (b=v_pi) | MC | Thm 2 (b=v_pi) | MC agrees |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in summary.items():
        mc = lambda k: f"{_fmt(r[k]['var'])} ± {_fmt(r[k]['var_se'])}"  # noqa: E731
        lines.append(
            f"| {name} | {_fmt(r['v_pi'])} | {_fmt(r['var_pi'])} | {mc('mc_pi')} | {_fmt(r['var_mu_hat'])} | "
            f"{mc('mc_mu_hat')} | {_fmt(r['epsilon'])} | {'yes' if r['theorem2_holds'] else 'NO'} | "
            f"{_fmt(r['var_mu_hat_eq6_vpi'])} | {mc('mc_mu_hat_eq6_vpi')} | "
            f"{'yes' if r['theorem2_holds_eq6_vpi'] else 'NO'} | {'yes' if r['mc_agrees'] else 'NO'} |")
    if learned:
        lines += ["", "ShortCorridor, BPO-REINFORCE: exact Var(G_0) (b = 0) for the policies at each checkpoint, "
                  "mean ± SE over seeds.", "",
                  "| episode | P(right) pi | P(right) mu | Var pi | Var mu-hat | Var learned mu | learned/pi "
                  "| seeds learned < pi | Var best state-indep. mu |", "|---|---|---|---|---|---|---|---|---|"]
        for r in learned:
            pm = lambda k: f"{_fmt(r[k])} ± {_fmt(r[k + '_se'])}"  # noqa: E731
            lines.append(f"| {r['episode']} | {r['p_right_pi'][0]:.3f} | {r['p_right_mu'][0]:.3f} | {pm('var_pi')} | "
                         f"{pm('var_mu_hat')} | {pm('var_mu_learned')} | {pm('ratio_learned_to_pi')} | "
                         f"{r['seeds_learned_below_pi']}/{r['seeds']} | {pm('var_mu_best_state_independent')} |")
    return "\n".join(lines) + "\n"


def plot(out: Path, sc: dict, learned: list[dict]) -> None:
    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    ep = np.array([r["episode"] for r in learned])
    for key, label, color in (("var_pi", "pi (on-policy)", "tab:blue"), ("var_mu_hat", "mu-hat (eq. 5)", "tab:green"),
                              ("var_mu_learned", "learned mu (BPO)", "tab:orange"),
                              ("var_mu_best_state_independent", "best state-independent mu", "tab:gray")):
        m, se = np.array([r[key] for r in learned]), np.array([r[key + "_se"] for r in learned])
        axes[0].errorbar(ep, m, yerr=se, marker="o", capsize=3, color=color, label=label)
    axes[0].set_yscale("log")
    axes[0].set_xlabel("training episode")
    axes[0].set_ylabel("exact Var(G_0), b = 0")
    axes[0].set_title("ShortCorridor: variance of the IS return")
    axes[0].legend()
    m = np.array([r["ratio_learned_to_pi"] for r in learned])
    se = np.array([r["ratio_learned_to_pi_se"] for r in learned])
    axes[1].errorbar(ep, m, yerr=se, marker="o", capsize=3, color="tab:orange")
    axes[1].axhline(1.0, color="k", linestyle="--", linewidth=1)
    axes[1].set_xlabel("training episode")
    axes[1].set_ylabel("Var(learned mu) / Var(pi), per seed")
    axes[1].set_title(f"mean ± SE over {learned[0]['seeds']} seeds; Var under mu-hat at pi*: "
                      f"{sc['var_mu_hat'] / sc['var_pi']:.3f} of pi's", fontsize=9)
    fig.tight_layout()
    save_figure(fig, out, "variance", dpi=150)


def run_verification(a: VerifyVarianceArgs, gamma: float) -> tuple[dict, list[dict]]:
    sc_mdp = V.short_corridor_mdp(gamma)
    summary = {sc_mdp.name: verify_mdp(sc_mdp, V.state_independent(PI_STAR), a.episodes,
                                       np.random.default_rng([a.seed, 0]), a.max_steps)}
    summary[sc_mdp.name]["policy"] = "P(right) = 2 - sqrt(2) in every cell (optimal)"
    for i in range(a.n_random):
        mdp, pi = V.random_mdp(a.seed + i)
        summary[mdp.name] = verify_mdp(mdp, pi, a.episodes, np.random.default_rng([a.seed, 1, i]), a.max_steps)
    learned = []
    if a.train:
        ev = train_short_corridor(a.seeds, a.train_episodes, a.seed)
        learned = learned_variances(ev["pi_probs"], ev["mu_probs"], ev["eval_episode"], a.checkpoints, sc_mdp)
        final = max(learned, key=lambda r: r["episode"])
        summary[sc_mdp.name].update({
            "var_mu_learned": final["var_mu_learned"], "var_mu_learned_se": final["var_mu_learned_se"],
            "var_mu_learned_episode": final["episode"], "var_pi_learned": final["var_pi"],
            "var_pi_learned_se": final["var_pi_se"], "learned_checkpoints": learned,
        })
    return summary, learned


def verify_variance_main(argv: list[str]) -> int:
    args = parse(VerifyVarianceArgs, argv, prog="bpo verify-variance")
    preset = get_preset("short_corridor")
    try:
        validate_args(args, preset.eval_every)
        validate_environment()  # before the folder is made: a refused run leaves nothing
        ensure_writable_dir(args.out, "--out")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("verifying Theorem 2 (Ctrl-C stops it; nothing is written until it ends)",
          flush=True)
    with end_at_once(f"nothing written to {str(args.out)!r} (the verification had not finished)"):
        summary, learned = run_verification(args, preset.reinforce.gamma)
    written, rescued = save_or_rescue(args.out, lambda folder: write_outputs(args, folder, summary, learned) or True,
                                      "--out", last_resort=lambda: json.dumps(summary, default=str))
    if rescued is not None or written is None:
        return 1
    print(format_table(summary, learned))
    n_ok = sum(r["theorem2_holds"] for r in summary.values())
    n_mc = sum(r["mc_agrees"] for r in summary.values())
    print(f"Theorem 2 (b = 0) holds on {n_ok}/{len(summary)} MDPs; (b = v_pi) on "
          f"{sum(r['theorem2_holds_eq6_vpi'] for r in summary.values())}/{len(summary)}; "
          f"Monte Carlo agrees on {n_mc}/{len(summary)} -> {args.out}")
    return 0


def write_outputs(args: VerifyVarianceArgs, out: Path, summary: dict, learned: list) -> None:
    """table.json, table.md, the plot, and summary.json last (it marks the results complete). Both
    JSON files record the provenance (code and package versions, device) under ``provenance``."""
    table = format_table(summary, learned)
    arguments = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    made_by = provenance("cpu")
    atomic_write_json(out / "table.json", {"args": arguments, "mdps": summary, "learned_checkpoints": learned,
                                           "provenance": made_by})
    atomic_write_text(out / "table.md", table)
    if learned:
        plot(out, summary["ShortCorridor"], learned)
    else:  # a plot left by an earlier run would not match this summary
        for ext in ("png", "pdf"):
            (out / f"variance.{ext}").unlink(missing_ok=True)
    atomic_write_json(out / "summary.json", {**summary, "provenance": made_by})
