"""The algorithms as top-level functions against independent references: REINFORCE (Listing 2)
against the hand-computed linear-softmax step, BPO-REINFORCE (Listing 3) with mu = pi against
REINFORCE, the PPO batch (Listing 1) against a loop GAE, the BPO-PPO batch (Listing 4) with
mu = pi against the PPO batch (Lemma 3), FQE epochs (eqs. 13/14) against dynamic programming, and
the mu epochs (eqs. 15/16) without Q-hat against pi."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bpo.agents.bpo import fqe_epochs, make_behaviour, mu_epochs, mu_loss
from bpo.agents.learner import bpo_ppo_batch, ppo_batch
from bpo.agents.reinforce import Episode, bpo_reinforce_episode_update, reinforce_episode_update
from bpo.config.schema import EpisodicBehaviourConfig, Hyperparams, OnPolicyReturnConfig, PPOHyperparams
from bpo.core import distributions as D
from bpo.core import replay as rb
from bpo.core.behaviour import behaviour_target_log_probs, discrete_mu_loss
from bpo.core.fqe import QState, fqe_step, take_action
from bpo.core.networks import MLP, SHORT_CORRIDOR_FEATURES, LinearSoftmax, two_action_logits

X = np.array(SHORT_CORRIDOR_FEATURES)


def episodic_hp(**changes) -> Hyperparams:
    values = dict(lr_start=0.1, lr_end=0.1, gamma=0.9, rho_bar=1.5, c_bar=1.0, lam=1.0, q_lr=1e-3, mu_lr=1e-3,
                  polyak_tau=0.02, symlog_reg_coef=1.0)
    values.update(changes)
    return Hyperparams(**{k: jnp.float32(v) for k, v in values.items()})


def ppo_hp(**changes) -> PPOHyperparams:
    values = dict(learning_rate=3e-4, clip_range=0.2, ent_coef=0.0, vf_coef=0.5, gamma=0.95, gae_lambda=0.9,
                  rho_bar=1.5, c_bar=1.0, q_lr=1e-2, mu_lr=1e-2, polyak_tau=0.02, symlog_reg_coef=1.0)
    values.update(changes)
    return PPOHyperparams(**{k: jnp.float32(v) for k, v in values.items()})


# ---- REINFORCE and BPO-REINFORCE (Listings 2 and 3) ----

def short_episode(pi_apply, pi_params):
    """Three steps then two rows of padding; log_prob is log pi, so pi collected it."""
    obs = jnp.ones((5, 1))
    action = jnp.array([1, 0, 1, 0, 0])
    log_prob = take_action(jax.nn.log_softmax(pi_apply(pi_params, obs)), action)
    valid = jnp.array([True, True, True, False, False])
    return Episode(obs=obs, action=action, reward=jnp.array([-1.0, -1.0, -2.0, 0.0, 0.0]),
                   terminated=jnp.array([0.0, 0.0, 1.0, 0.0, 0.0]), truncated=jnp.zeros(5), next_obs=obs,
                   log_prob=log_prob, valid=valid)


def test_reinforce_episode_update_is_the_summed_listing2_step():
    policy = LinearSoftmax(SHORT_CORRIDOR_FEATURES, two_action_logits(0.3))
    params = policy.init(jax.random.PRNGKey(0), jnp.ones((1, 1)))
    tx = optax.sgd(0.1)
    ep = short_episode(policy.apply, params)
    update = jax.jit(lambda p, o, e: reinforce_episode_update(p, o, e, episodic_hp(gamma=0.9), tx=tx,
                                                              pi_apply=policy.apply))
    new, _, metrics = update(params, tx.init(params), ep)
    pi = np.array([0.7, 0.3])
    rewards, gamma = [-1.0, -1.0, -2.0], 0.9
    returns = [sum(gamma ** (k - t) * rewards[k] for k in range(t, 3)) for t in range(3)]
    step = 0.1 * sum(g * (X[a] - pi @ X) for g, a in zip(returns, [1, 0, 1], strict=True))
    np.testing.assert_allclose(new["params"]["theta"] - params["params"]["theta"], step, rtol=1e-5)
    log_pi = np.log(pi[[1, 0, 1]])
    assert float(metrics["pg_loss"]) == pytest.approx(-float(np.dot(returns, log_pi)), rel=1e-5)


def tiny_behaviour_config(**changes) -> EpisodicBehaviourConfig:
    values = dict(replay_size=16, q_batch_size=8, mu_batch_size=8, q_hidden=(8,), mu_hidden=(8,))
    values.update(changes)
    return EpisodicBehaviourConfig(**values)


def test_bpo_reinforce_with_mu_equal_to_pi_takes_the_reinforce_step():
    """All IS weights are 1 when mu = pi and rho_bar, c_bar >= 1, so pi's update is REINFORCE's."""
    init_logits = two_action_logits(0.3)
    policy = LinearSoftmax(SHORT_CORRIDOR_FEATURES, init_logits)
    params = policy.init(jax.random.PRNGKey(0), jnp.ones((1, 1)))
    cfg = tiny_behaviour_config()
    mu_net = MLP(cfg.mu_hidden, 2, zero_head=True, head_bias=init_logits)
    beh = make_behaviour(cfg, True, 2, lambda p, o: D.logits_dist(mu_net.apply(p, o)))
    hp = episodic_hp(rho_bar=1.5, c_bar=1.0)
    bstate = beh.init(jax.random.PRNGKey(1), jnp.ones(1), jnp.int32(0), mu_net.init(jax.random.PRNGKey(2), jnp.ones(1)),
                      hp)
    zero = jnp.float32(0.0)
    replay = rb.init_replay({"obs": jnp.ones(1), "action": jnp.int32(0), "reward": zero, "terminated": zero,
                             "truncated": zero, "next_obs": jnp.ones(1), "log_mu": zero}, cfg.replay_size)
    tx = optax.adam(0.1)
    ep = short_episode(policy.apply, params)
    want, want_opt, want_metrics = reinforce_episode_update(params, tx.init(params), ep, hp, tx=tx,
                                                            pi_apply=policy.apply)
    update = jax.jit(lambda *args: bpo_reinforce_episode_update(*args, tx=tx, pi_apply=policy.apply, beh=beh))
    got, got_opt, new_bstate, new_replay, metrics = update(jax.random.PRNGKey(3), params, tx.init(params), bstate,
                                                           replay, ep, hp)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), (got, got_opt), (want, want_opt))
    assert float(metrics["pg_loss"]) == pytest.approx(float(want_metrics["pg_loss"]), rel=1e-6)
    assert int(new_replay.size) == 3  # the valid rows only
    assert float(metrics["is_ratio_mean"]) == pytest.approx(1.0) and float(metrics["ess_frac"]) == pytest.approx(1.0)
    assert {"q_loss", "q_hat_loss", "mu_loss"} <= set(metrics)
    assert not np.allclose(new_bstate.mu_params["params"]["Dense_0"]["kernel"],
                           bstate.mu_params["params"]["Dense_0"]["kernel"])  # the behaviour step ran


def test_behaviour_init_draws_q_and_q_hat_from_the_two_halves_of_its_key():
    """Q from split(key)[0], Q-hat from split(key)[1], both with their target network equal to
    them; mu's parameters are the caller's."""
    cfg = tiny_behaviour_config(zero_init_head=False)
    beh = make_behaviour(cfg, True, 2, lambda p, o: D.logits_dist(o))
    mu_params = {"w": jnp.ones(3)}
    key = jax.random.PRNGKey(5)
    state = beh.init(key, jnp.ones(3), jnp.int32(0), mu_params, ppo_hp())
    k_q, k_qh = jax.random.split(key)
    for q, k in ((state.q, k_q), (state.q_hat, k_qh)):
        jax.tree.map(np.testing.assert_array_equal, q.params, beh.q_net.init(k, jnp.ones(3)))
        jax.tree.map(np.testing.assert_array_equal, q.target_params, q.params)
    assert state.mu_params is mu_params


# ---- PPO and BPO-PPO batches (Listings 1 and 4) ----

def random_rows(seed=0, steps=12, envs=3, n_actions=4):
    rng = np.random.default_rng(seed)
    terminated = (rng.random((steps, envs)) < 0.15).astype(np.float32)
    truncated = ((rng.random((steps, envs)) < 0.1) & (terminated == 0)).astype(np.float32)
    logits = jnp.asarray(rng.normal(size=(steps, envs, n_actions)), jnp.float32)
    action = jnp.asarray(rng.integers(0, n_actions, (steps, envs)))
    rows = {"obs": jnp.asarray(rng.normal(size=(steps, envs, 2)), jnp.float32), "action": action,
            "reward": jnp.asarray(rng.normal(size=(steps, envs)), jnp.float32),
            "terminated": jnp.asarray(terminated), "truncated": jnp.asarray(truncated),
            "log_prob": D.log_prob(D.logits_dist(logits), action, True)}
    values = rng.normal(size=(steps, envs)).astype(np.float32)
    # V(s_{t+1}) is the next row's V(s) within an episode; after an episode end and at the last row
    # it is the value of an observation no row holds.
    done = np.maximum(terminated, truncated)
    next_values = np.where(done > 0, rng.normal(size=(steps, envs)), np.roll(values, -1, axis=0)).astype(np.float32)
    next_values[-1] = rng.normal(size=envs)
    values, next_values = jnp.asarray(values), jnp.asarray(next_values)
    return rows, values, next_values, D.logits_dist(logits)


def loop_gae(r, v, nv, term, done, gamma, lam):
    adv, out = np.zeros(r.shape[1]), np.zeros_like(r)
    for t in reversed(range(r.shape[0])):
        delta = r[t] + gamma * (1 - term[t]) * nv[t] - v[t]
        adv = delta + gamma * lam * (1 - done[t]) * adv
        out[t] = adv
    return out


def test_ppo_batch_advantages_are_a_plain_loop_gae():
    rows, values, next_values, _ = random_rows()
    hp = ppo_hp(gamma=0.95, gae_lambda=0.9)
    batch = ppo_batch(rows, values, next_values, hp)
    r, term = np.asarray(rows["reward"]), np.asarray(rows["terminated"])
    done = np.maximum(term, np.asarray(rows["truncated"]))
    want = loop_gae(r, np.asarray(values), np.asarray(next_values), term, done, 0.95, 0.9)
    np.testing.assert_allclose(batch["advantage"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch["return"], want + np.asarray(values), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(batch["old_log_prob"], rows["log_prob"])
    np.testing.assert_array_equal(batch["adv_weight"], 1.0)


@pytest.mark.parametrize("advantage", ["authors", "eq11"])
@pytest.mark.parametrize("weight_on_advantage", [False, True])
def test_bpo_ppo_batch_on_policy_is_the_ppo_batch(advantage, weight_on_advantage):
    """Lemma 3: with mu = pi and rho_bar, c_bar >= 1 the truncated IS-TD(lambda) batch is GAE's."""
    rows, values, next_values, pi = random_rows(seed=1)
    hp = ppo_hp(rho_bar=1.5, c_bar=1.0)
    cfg = OnPolicyReturnConfig(advantage=advantage, weight_on_advantage=weight_on_advantage,
                               trust_region_delta=0.5)
    got, diagnostics = bpo_ppo_batch(rows, values, next_values, lambda _: pi, lambda _: pi, hp, cfg, discrete=True)
    want = ppo_batch(rows, values, next_values, hp)
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5, err_msg=key)
    assert float(diagnostics["is_ratio_mean"]) == pytest.approx(1.0)
    assert float(diagnostics["trm_mask_rate"]) == 0.0  # pi/mu = 1 everywhere: no segment is masked


def test_bpo_ppo_batch_off_policy_weights():
    """Off-policy: value targets carry the IS ratios, and the weight-on-advantage form moves the
    ratio's denominator to pi_old and weights the advantage by min(rho_bar, pi_old/mu)."""
    rows, values, next_values, mu = random_rows(seed=2)
    pi = D.logits_dist(mu.loc + jnp.asarray(np.random.default_rng(3).normal(size=mu.loc.shape), jnp.float32))
    hp = ppo_hp(rho_bar=1.2, c_bar=1.0)
    plain, _ = bpo_ppo_batch(rows, values, next_values, lambda _: pi, lambda _: mu, hp, OnPolicyReturnConfig(),
                             discrete=True)
    weighted, _ = bpo_ppo_batch(rows, values, next_values, lambda _: pi, lambda _: mu, hp,
                                OnPolicyReturnConfig(weight_on_advantage=True), discrete=True)
    log_pi = D.log_prob(pi, rows["action"], True)
    np.testing.assert_array_equal(plain["old_log_prob"], rows["log_prob"])
    np.testing.assert_array_equal(plain["adv_weight"], 1.0)
    np.testing.assert_array_equal(weighted["old_log_prob"], log_pi)
    np.testing.assert_allclose(weighted["adv_weight"], np.minimum(1.2, np.exp(log_pi - rows["log_prob"])), rtol=1e-6)
    np.testing.assert_array_equal(plain["advantage"], weighted["advantage"])
    np.testing.assert_array_equal(plain["pi_old_log_prob"], log_pi)
    np.testing.assert_array_equal(plain["behaviour_log_prob"], rows["log_prob"])
    on_policy = ppo_batch(rows, values, next_values, hp)
    assert not np.allclose(plain["return"], on_policy["return"], atol=1e-3)


# ---- FQE epochs (eqs. 13/14) and mu epochs (eqs. 15/16) ----

# A deterministic MDP: 3 states, 2 actions, next state NEXT[s, a] (3 = terminal).
NEXT = np.array([[1, 2], [2, 3], [0, 3]])
REWARD = np.array([[1.0, -2.0], [0.5, 3.0], [-1.0, 2.0]])
PI = np.array([[0.3, 0.7], [0.6, 0.4], [0.5, 0.5]])


def exact_q(reward, gamma):
    """q = reward + gamma * sum_{a'} pi(a'|s') q(s', a'), solved exactly."""
    m = np.zeros((6, 6))
    for s in range(3):
        for a in range(2):
            if NEXT[s, a] < 3:
                m[2 * s + a, 2 * NEXT[s, a]: 2 * NEXT[s, a] + 2] = PI[NEXT[s, a]]
    return np.linalg.solve(np.eye(6) - gamma * m, reward.reshape(-1)).reshape(3, 2)


def mdp_replay(capacity=16):
    """D full of the 6 transitions, repeated; the second reward field plays r-hat."""
    s = np.arange(capacity) % 6 // 2
    a = np.arange(capacity) % 2
    eye = np.eye(3, dtype=np.float32)
    s2 = NEXT[s, a]
    terminal = s2 == 3
    data = {"obs": eye[s], "action": a.astype(np.int32), "reward": REWARD[s, a].astype(np.float32),
            "r_hat": (REWARD[s, a] ** 2).astype(np.float32), "terminated": terminal.astype(np.float32),
            "truncated": np.zeros(capacity, np.float32), "next_obs": np.where(terminal[:, None], 0.0, eye[s2 % 3]),
            "log_mu": np.log(np.full(capacity, 0.5, np.float32))}
    replay = rb.Replay(data={k: jnp.asarray(v) for k, v in data.items()}, ptr=jnp.int32(0), size=jnp.int32(capacity))
    return replay, s, a


def pi_on(obs):
    """pi as a Dist of the one-hot states (zero logits at the terminal observation)."""
    return D.logits_dist(obs @ jnp.log(jnp.asarray(PI, jnp.float32)))


def fqe_setup(n_epochs, symlog=True, **changes):
    cfg = tiny_behaviour_config(n_qvf_epochs=n_epochs, q_hidden=(32,), symlog_targets=symlog, **changes)
    beh = make_behaviour(cfg, True, 2, lambda p, o: D.logits_dist(o))
    replay, s, a = mdp_replay(cfg.replay_size)
    params = jax.jit(beh.q_net.init)(jax.random.PRNGKey(0), jnp.zeros(3))
    return cfg, beh, replay, s, a, params


@pytest.mark.parametrize("field,discount", [("reward", 0.5), ("r_hat", 0.25)])
def test_fqe_epochs_converge_to_the_exact_q(field, discount):
    """1000 epochs at q_lr, then 1000 at a tenth of it (``lr_scale``): the second phase damps
    the minibatch noise of Adam's iterate, so Q lands on the fixed point whatever the sampling."""
    cfg, beh, replay, s, a, params = fqe_setup(1000)
    hp = ppo_hp(q_lr=1e-2)
    log_pi = D.log_prob(pi_on(replay.data["obs"]), replay.data["action"], True)
    state = QState(params, params, beh.q_tx(hp).init(params))
    bounds = (jnp.float32(-100.0), jnp.float32(100.0))

    def run(state):
        for phase, lr_scale in enumerate((1.0, 0.1)):
            state, metrics = fqe_epochs(jax.random.PRNGKey(phase), state, replay, field, discount, bounds,
                                        pi_on(replay.data["next_obs"]), log_pi, beh=beh, tx=beh.q_tx(hp, lr_scale),
                                        hp=hp)
        return state, metrics

    state, metrics = jax.jit(run)(state)
    want = exact_q(REWARD if field == "reward" else REWARD**2, discount)
    got = beh.q_value(state.params, jnp.eye(3), jnp.zeros(3, jnp.int32)), beh.q_value(state.params, jnp.eye(3),
                                                                                         jnp.ones(3, jnp.int32))
    np.testing.assert_allclose(np.stack(got, axis=1), want, atol=0.01)
    assert float(metrics["loss"]) < 1e-3


def test_fqe_epochs_one_minibatch_is_one_fqe_step_on_d():
    """One epoch of one minibatch (q_batch_size = |D|) is fqe_step on all of D: the loss is a mean,
    so the order of the rows cannot matter."""
    _, beh, replay, _, _, params = fqe_setup(1, q_batch_size=16)
    params = jax.tree.map(lambda x: x + 0.1, params)  # away from the zero head, so bootstrapping matters
    hp = ppo_hp(q_lr=1e-2)
    tx = beh.q_tx(hp)
    log_pi = D.log_prob(pi_on(replay.data["obs"]), replay.data["action"], True)
    state = QState(params, params, tx.init(params))
    bounds = (jnp.float32(-4.0), jnp.float32(6.0))
    pi_next = pi_on(replay.data["next_obs"])
    got, _ = jax.jit(lambda st: fqe_epochs(jax.random.PRNGKey(1), st, replay, "reward", 0.5, bounds, pi_next, log_pi,
                                           beh=beh, tx=tx, hp=hp))(state)
    batch = {**replay.data, "idx": jnp.arange(16), "key": jax.random.PRNGKey(0)}
    want, _ = jax.jit(lambda st: fqe_step(
        st, batch, log_pi, predict=lambda p, b: beh.q_output(p, b["obs"], b["action"]),
        next_values=lambda p, b: beh.next_values(pi_next, p, b), tx=tx, gamma=0.5, bounds=bounds, tau=hp.polyak_tau,
        reg_coef=hp.symlog_reg_coef, settings=beh.fqe_settings()))(state)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6), got, want)
    assert not np.allclose(got.params["params"]["Dense_0"]["kernel"], params["params"]["Dense_0"]["kernel"])


def test_mu_epochs_without_q_hat_make_mu_pi():
    """The 'no Q-hat' ablation: the discrete target is exactly pi, and the mu epochs reach it."""
    cfg = tiny_behaviour_config(use_q_hat=False, n_mu_epochs=300, mu_hidden=(16,))
    mu_net = MLP(cfg.mu_hidden, 2, zero_head=True)
    beh = make_behaviour(cfg, True, 2, lambda p, o: D.logits_dist(mu_net.apply(p, o)))
    replay, *_ = mdp_replay(cfg.replay_size)
    obs = replay.data["obs"]
    pi_here = pi_on(obs)
    q_hat_all = beh.discrete_q_hat(None, obs, jnp.float32(1.0))
    np.testing.assert_array_equal(q_hat_all, 1.0)
    np.testing.assert_allclose(jnp.exp(behaviour_target_log_probs(pi_here.loc, q_hat_all)), PI[np.arange(16) % 6 // 2],
                               rtol=1e-6)
    params = mu_net.init(jax.random.PRNGKey(0), jnp.zeros(3))
    hp = ppo_hp(mu_lr=1e-2)
    tx = beh.mu_tx(hp)
    start = mu_loss(params, None, obs, pi_here, None, None, q_hat_all, beh=beh)
    new, _, mean_loss = jax.jit(lambda p: mu_epochs(jax.random.PRNGKey(1), p, tx.init(p), replay, pi_here, None, None,
                                                    q_hat_all, beh=beh, tx=tx))(params)
    mu_probs = jax.nn.softmax(mu_net.apply(new, jnp.eye(3)))
    np.testing.assert_allclose(mu_probs, PI, atol=0.01)
    entropy_of_pi = discrete_mu_loss(pi_here.loc, jax.nn.log_softmax(pi_here.loc))  # the loss's minimum
    assert float(mean_loss) < float(start)
    assert float(mu_loss(new, None, obs, pi_here, None, None, q_hat_all, beh=beh)) == pytest.approx(
        float(entropy_of_pi), abs=1e-3)


def test_continuous_mu_epochs_without_q_hat_track_pi():
    """Eq. (16) without Q-hat is KL(mu || pi) by reparameterised samples: mu's mean goes to pi's."""
    cfg = tiny_behaviour_config(use_q_hat=False, n_mu_epochs=300, mu_batch_size=16)

    def mu_apply(p, obs):
        return D.Dist(obs @ p["w"], jnp.broadcast_to(jnp.exp(p["log_std"]), (obs.shape[0], 1)))

    beh = make_behaviour(cfg, False, 1, mu_apply, np.array([-5.0]), np.array([5.0]))
    replay, *_ = mdp_replay(cfg.replay_size)
    obs = replay.data["obs"]
    pi_mean = jnp.asarray([[1.0], [-0.5], [2.0]])
    pi_here = D.Dist(obs @ pi_mean, jnp.full((16, 1), 0.5))
    params = {"w": jnp.zeros((3, 1)), "log_std": jnp.zeros(1)}
    hp = ppo_hp(mu_lr=3e-2)
    tx = beh.mu_tx(hp)
    new, _, _ = jax.jit(lambda p: mu_epochs(jax.random.PRNGKey(1), p, tx.init(p), replay, pi_here, None, None, None,
                                            beh=beh, tx=tx))(params)
    np.testing.assert_allclose(new["w"], pi_mean, atol=0.1)
    assert float(jnp.exp(new["log_std"])[0]) == pytest.approx(0.5, abs=0.1)
