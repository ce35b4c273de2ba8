"""Property-based tests (hypothesis) of config validation: any value of any type in any field.

For every field of ``EpisodicTrainConfig`` and ``OnPolicyTrainConfig`` (nested ``ppo.*``,
``bpo.*``, ``reinforce.*`` included), set on a preset to a value drawn from a broad strategy (ints
of any size, floats with nan/inf/negatives, bools, strings, None, tuples, and values of the
field's own type), ``bpo.agents.methods.validate`` must either

* return the config, whose field then holds a value of its declared type (a bool for a bool, a
  non-bool int for an int, a real non-NaN number for a float, finite unless inf is documented as
  meaningful, one of the choices of a Literal, a tuple of ints for widths), or
* raise ``ConfigError`` naming that field (or the field of a documented cross-field constraint,
  ``CROSS_FIELD``) with a message that says what is allowed,

and never raise anything else. The command line is checked too, with invalid values only (so
nothing trains): ``bpo train`` returns 2 with ``error: FIELD: ...`` or tyro exits with status 2,
without a traceback.

No value is exempt: every value drawn or listed is checked. Every kind of value that once got
past ``validate`` or crashed it (bools as numbers or widths, non-bools in bool fields, a number
where widths go, NaN, inf and ints beyond float range, a non-string preset or variant) has a
member in ``EDGE_VALUES``, so ``test_validate_edge_values`` checks it in every field on every run;
``tests/test_bad_inputs.py`` pins the field and message of one case of each kind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import re
import sys
import typing
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envs
from bpo.agents.methods import validate
from bpo.config.presets import PRESETS, VARIANTS, get_preset
from bpo.config.schema import (
    METHOD_SECTIONS,
    ConfigError,
    EpisodicTrainConfig,
    OnPolicyTrainConfig,
    replace,
    traced_hyperparams,
    with_bpo,
)
from envs.gymnasium_envs import GYMNASIUM_ENVS
from experiments.cli import main

PRESET_NAMES = ("cartpole_ppo", "short_corridor", "mujoco_default")
ENV_IDS = sorted(set(envs.JAX_ENVS) | set(envs.FUNCTIONAL_ENVS) | set(GYMNASIUM_ENVS))

# database=None: no .hypothesis/ folder in the checkout.
SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# Validation builds the environment of a config once to read its spec (gymnax turns a few
# constants into arrays then): done here, not inside the first example's time.
for _name in PRESET_NAMES:
    validate(get_preset(_name))


def leaf_fields(cls, prefix=""):
    """(dotted name, declared type) of every non-dataclass field of ``cls``, nested ones included."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        sections = [h for h in typing.get_args(hint) if dataclasses.is_dataclass(h)]  # X | None: the bpo section
        hint = sections[0] if sections else hint
        if dataclasses.is_dataclass(hint):
            yield from leaf_fields(hint, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", hint


FIELDS = {cls: dict(leaf_fields(cls)) for cls in (EpisodicTrainConfig, OnPolicyTrainConfig)}


def fields_of(cfg) -> dict:
    """FIELDS of ``cfg``'s kind but another method's section (``a2c.*`` of a PPO run: refused by
    ``replace`` before validation, tests/test_a2c.py)."""
    def absent(name):
        head = name.partition(".")[0]
        return head in METHOD_SECTIONS and getattr(cfg, head) is None
    return {name: hint for name, hint in FIELDS[type(cfg)].items() if not absent(name)}


CASES = [(preset, name) for preset in PRESET_NAMES for name in fields_of(get_preset(preset))]

# A value set on the key may be reported under these fields too: constraints between fields.
CROSS_FIELD = {
    "episodes": {"eval_every"},  # eval_every must divide episodes
    # batch_size must divide n_steps * n_envs; the budget in whole rollouts must fit 32 bits
    "ppo.n_steps": {"ppo.batch_size", "total_timesteps"},
    "ppo.n_envs": {"ppo.batch_size", "total_timesteps"},
    "a2c.n_steps": {"total_timesteps"},
    "a2c.n_envs": {"total_timesteps"},
    "bpo.q_batch_size": {"bpo.replay_size"},  # the replay must hold one batch
    "bpo.mu_batch_size": {"bpo.replay_size"},
    "backend": {"env"},  # the environment must exist on the backend
    "env": {"ppo.use_sde", "a2c.use_sde", "bpo.mu_loss"},  # gSDE, discrete mu losses: a matching action space
    # PPO splits the rollout in batches; another method reads its own section, which the preset lacks
    "method": {"ppo.batch_size", "ppo", "a2c"},
    "bpo.clip_targets": {"reinforce.gamma"},  # clipped targets need gamma < 1
}
METHOD_CHECKED = {"ppo.batch_size"}
"""Constraints a method checks (``PPO.validate``: its minibatches split the rollout)."""
# Messages say what is allowed.
ALLOWED_WORDS = re.compile(r"\bmust\b|\ballowed\b|\bone of\b|\bleave it\b|\bneeds\b")
# Float fields for which inf is documented as meaningful ("inf disables it", "inf: none").
INF_ALLOWED = {
    "returns.rho_bar", "returns.c_bar", "bpo.q_max_grad_norm", "bpo.mu_max_grad_norm", "ppo.max_grad_norm",
    "a2c.max_grad_norm",
    "returns.trust_region_delta",
}
HUGE = 10**400  # an int beyond float range


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _too_big_for_float(value):
    return _is_number(value) and isinstance(value, int) and abs(value) > sys.float_info.max


# ---------------------------------------------------------------------------------------------
# The property
# ---------------------------------------------------------------------------------------------


def optional_of(hint):
    """T of a field declared ``T | None`` (None: a field whose None means "use the default"), else None."""
    args = typing.get_args(hint)
    return args[0] if len(args) == 2 and args[1] is type(None) else None


def type_problem(name, hint, value):
    """Why ``value`` is not a valid value of a field declared ``hint``; None if it is."""
    if optional_of(hint) is not None:
        return None if value is None else type_problem(name, optional_of(hint), value)
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = _is_number(value) and not _too_big_for_float(value) and not math.isnan(value)
        ok = ok and (math.isfinite(value) or name in INF_ALLOWED)
    elif hint is str:
        ok = isinstance(value, str)
    elif typing.get_origin(hint) is Literal:
        ok = isinstance(value, str) and value in typing.get_args(hint)
    elif typing.get_origin(hint) is tuple:
        ok = isinstance(value, tuple) and all(isinstance(w, int) and not isinstance(w, bool) for w in value)
    else:
        raise AssertionError(f"{name}: no rule for type {hint}")
    return None if ok else f"{name} = {value!r} is not a valid {hint}"


def check_validate(cfg, name, value):
    """The property: validate returns a well-typed config or raises a ConfigError about ``name``."""
    try:
        out = validate(cfg)
    except ConfigError as e:
        allowed = {name} | CROSS_FIELD.get(name, set())
        assert e.field_name in allowed, f"setting {name} = {value!r}: the error names {e.field_name!r}: {e}"
        message = str(e)
        assert message.startswith(f"{e.field_name}: "), message
        assert ALLOWED_WORDS.search(message), f"the message does not say what is allowed: {message}"
        return
    # Anything else than ConfigError propagates and fails the test with its traceback.
    assert out is cfg
    hint = fields_of(cfg)[name]
    problem = type_problem(name, hint, value)
    assert problem is None, f"validate accepted {problem}"


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

EDGE_VALUES = [
    None, True, False, 0, -1, 1, 2**31, 2**63, HUGE, -HUGE, 0.0, -0.0, 5e-324, 1e308, -1e-9, 0.5, 1.0,
    math.nan, math.inf, -math.inf, "", " ", "0", "1", "inf", "nan", "True", "None", "relu", (), (0,), (1,), (64, 64),
    (-1,), (True,), ("64",), (1.5,), (None,), ((1,),),
]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-3, 300), st.floats(), st.floats(-1.0, 2.0),
    st.text(max_size=10),
)
TUPLES = st.one_of(
    st.lists(SCALARS, max_size=3).map(tuple),
    st.lists(st.integers(-2, 300), min_size=1, max_size=3).map(tuple),
)
NAMES = st.sampled_from(ENV_IDS + list(VARIANTS) + sorted(PRESETS))


def typed_values(hint):
    """Values of the declared type (valid or not), so that the cross-field checks are reached."""
    if optional_of(hint) is not None:
        return st.one_of(st.none(), typed_values(optional_of(hint)))
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers(-5, 10_000)
    if hint is float:
        return st.floats()
    if hint is str:
        return st.one_of(NAMES, st.text(max_size=10))
    if typing.get_origin(hint) is Literal:
        return st.sampled_from(typing.get_args(hint))
    return st.lists(st.integers(-1, 256), max_size=3).map(tuple)


def field_values(hint):
    return st.one_of(SCALARS, TUPLES, st.sampled_from(EDGE_VALUES), typed_values(hint), typed_values(hint))


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_presets_are_valid_and_well_typed(preset):
    cfg = get_preset(preset)
    assert validate(cfg) is cfg
    for name, hint in fields_of(cfg).items():
        value = cfg
        for part in name.split("."):
            value = getattr(value, part)
        assert type_problem(name, hint, value) is None


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_validate_edge_values(preset):
    """Every value of EDGE_VALUES (which random draws reach rarely: ints beyond float range,
    nan, inf, empty and odd tuples, ...) in every field; all failures listed at once."""
    base = get_preset(preset)
    failures = []
    for name in fields_of(base):
        for value in EDGE_VALUES:
            cfg = replace(base, **{name: value})
            try:
                check_validate(cfg, name, value)
            except Exception as e:  # collected, reported below
                failures.append(f"{name} = {repr(value)[:40]}: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)


@pytest.mark.parametrize(("preset", "name"), CASES, ids=[f"{p}-{n}" for p, n in CASES])
@settings(max_examples=15, **SETTINGS)
@given(data=st.data())
def test_validate_any_value(preset, name, data):
    """Any value in any one field: a well-typed config back, or a ConfigError about that field."""
    base = get_preset(preset)
    value = data.draw(field_values(fields_of(base)[name]), label=name)
    check_validate(replace(base, **{name: value}), name, value)


@pytest.mark.parametrize("preset", ["cartpole_ppo", "short_corridor"])
@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_validate_several_fields(preset, data):
    """Several fields at once, each drawn like above: a ConfigError must name one of them (or a
    field they constrain)."""
    base = get_preset(preset)
    fields = fields_of(base)
    names = data.draw(st.lists(st.sampled_from(sorted(fields)), min_size=2, max_size=5, unique=True), label="fields")
    changes = {name: data.draw(field_values(fields[name]), label=name) for name in names}
    try:
        validate(replace(base, **changes))
    except ConfigError as e:
        allowed = set(names).union(*(CROSS_FIELD.get(name, set()) for name in names))
        assert e.field_name in allowed, f"setting {changes}: the error names {e.field_name!r}: {e}"
        assert ALLOWED_WORDS.search(str(e)), str(e)
        return
    for name, value in changes.items():
        problem = type_problem(name, fields[name], value)
        assert problem is None, f"validate accepted {problem} (changes: {changes})"


# --- the command line (invalid values only: nothing may train) --------------------------------


def run_cli(argv):
    """``experiments.cli.main(argv)`` with its output captured: (exit status, stdout + stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = main(argv)
        except SystemExit as e:  # tyro on an unparsable value
            status = e.code
    return status, out.getvalue()


def _parses(parse, text):
    try:
        return True, parse(text)
    except (ValueError, OverflowError):
        return False, None


def invalid_text(parse, valid):
    """Command-line strings that ``parse`` (what tyro applies) rejects, or whose value ``valid`` rejects."""

    def bad(text):
        parsed, value = _parses(parse, text)
        return not parsed or not valid(value)

    numbers = st.one_of(st.integers().map(str), st.floats().map(repr), st.floats(-2, 2).map(str))
    special = st.sampled_from(["", "-", "--", "--x", "-h", "--help", "nan", "-inf", "1e3", "0x10"])
    return st.one_of(st.text(max_size=8), numbers, special).filter(bad)


# (flag, field, what tyro parses the text as, which parsed values validate accepts)
CLI_FIELDS = [
    ("--ppo.n-steps", "ppo.n_steps", int, lambda n: n >= 1 and (n * 8) % 256 == 0),  # batch 256 of n_steps x 8 envs
    ("--returns.c-bar", "returns.c_bar", float, lambda x: x > 0),  # inf allowed
    ("--ppo.gamma", "ppo.gamma", float, lambda x: 0 <= x < 1),
    ("--returns.traj", "returns.traj", str, lambda s: s in ("per_decision", "traj", "traj_shifted")),
    ("--seeds", "seeds", int, lambda n: n >= 1),
    ("--ppo.ent-coef", "ppo.ent_coef", float, lambda x: 0 <= x < math.inf),  # a finite number >= 0
    ("--ppo.log-std-init", "ppo.log_std_init", float, math.isfinite),
]


@pytest.mark.parametrize(("flag", "name", "parse", "valid"), CLI_FIELDS, ids=[c[0] for c in CLI_FIELDS])
@settings(max_examples=15, deadline=None, database=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_cli_rejects_invalid_values(flag, name, parse, valid, data, tmp_path_factory):
    """``bpo train cartpole_ppo FLAG VALUE`` with an invalid VALUE: status 2 with one ``error:``
    line about the field (or the field it constrains), or tyro's usage error (status 2); never a
    traceback. ``--bpo.q-hat-floor 0`` (validated after every field here) makes an unexpectedly
    valid value fail validation too, so that no example can start training."""
    text = data.draw(invalid_text(parse, valid), label=flag)
    out_dir = tmp_path_factory.mktemp("cli")
    status, output = run_cli(["train", "cartpole_ppo", flag, text, "--bpo.q-hat-floor", "0", "--out", str(out_dir)])
    assert status == 2, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    if errors:  # rejected by validate (tyro's own errors are boxes without "error: ")
        allowed = {name} | CROSS_FIELD.get(name, set())
        if CROSS_FIELD.get(name, set()) & METHOD_CHECKED:
            # The method checks its own constraints after every field (bpo.agents.methods.validate),
            # so an individually valid value that breaks one of them meets the invalid sentinel first.
            allowed.add("bpo.q_hat_floor")
        assert len(errors) == 1 and any(errors[0].startswith(f"error: {f}: ") for f in allowed), output
    assert not any(out_dir.iterdir()), "nothing may be written"


def test_bpo_ppo_trains_pi_with_the_shared_ppo_entropy_weight():
    """Table 4 lists beta_ent under "PPO (shared)" and Section 6 keeps PPO's parameters identical
    for BPO: pi's entropy weight in BPO-PPO is ppo.ent_coef unless bpo.ppo_ent_coef is set."""
    cfg = get_preset("mujoco_default")
    assert cfg.bpo.ppo_ent_coef is None and cfg.ppo.ent_coef == 0.001
    for algo in ("ppo", "bpo"):
        assert float(traced_hyperparams(with_bpo(cfg, algo == "bpo")).ent_coef) == pytest.approx(0.001)
    authors = replace(cfg, **{"bpo.ppo_ent_coef": 0.0})
    assert float(traced_hyperparams(authors).ent_coef) == 0.0
    assert float(traced_hyperparams(with_bpo(authors, False)).ent_coef) == pytest.approx(0.001)
