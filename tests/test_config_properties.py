"""Property-based tests (hypothesis) of config validation: any value of any type in any field.

For every field of ``EpisodicTrainConfig`` and ``OnPolicyTrainConfig`` (nested ``ppo.*``,
``bpo.*``, ``reinforce.*`` included), set on a preset to a value drawn from a broad strategy (ints
of any size, floats with nan/inf/negatives, bools, strings, None, tuples, and values of the
field's own type), ``bpo.validation.validate`` must either

* return the config, whose field then holds a value of its declared type (a bool for a bool, a
  non-bool int for an int, a real non-NaN number for a float, finite unless inf is documented as
  meaningful, one of the choices of a Literal, a tuple of ints for widths), or
* raise ``ConfigError`` naming that field (or the field of a documented cross-field constraint,
  ``CROSS_FIELD``) with a message that says what is allowed,

and never raise anything else. The command line is checked too, with invalid values only (so
nothing trains): ``bpo train`` returns 2 with ``error: FIELD: ...`` or tyro exits with status 2,
without a traceback.

Gaps of ``bpo.validation`` found by these tests are listed in ``KNOWN_GAPS``: the property tests
skip the values a gap covers, and ``test_known_gap`` keeps a minimal reproduction of each as a
strict xfail, so that fixing ``validate`` makes it fail until the entry is removed here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import re
import sys
import typing
from collections.abc import Callable
from typing import Literal, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envs
from bpo.cli import main
from bpo.config import ConfigError, EpisodicTrainConfig, OnPolicyTrainConfig, replace
from bpo.presets import PRESETS, VARIANTS, get_preset
from bpo.validation import validate
from envs.gymnasium_envs import GYMNASIUM_ENVS

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
        if dataclasses.is_dataclass(hint):
            yield from leaf_fields(hint, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", hint


FIELDS = {cls: dict(leaf_fields(cls)) for cls in (EpisodicTrainConfig, OnPolicyTrainConfig)}
CASES = [(preset, name) for preset in PRESET_NAMES for name in FIELDS[type(get_preset(preset))]]

# A value set on the key may be reported under these fields too: constraints between fields.
CROSS_FIELD = {
    "episodes": {"eval_every"},  # eval_every must divide episodes
    "ppo.n_steps": {"ppo.batch_size"},  # batch_size must divide n_steps * n_envs
    "ppo.n_envs": {"ppo.batch_size"},
    "bpo.q_batch_size": {"bpo.replay_size"},  # the replay must hold one batch
    "bpo.mu_batch_size": {"bpo.replay_size"},
    "backend": {"env"},  # the environment must exist on the backend
    "env": {"ppo.use_sde", "bpo.mu_loss"},  # gSDE and the discrete mu losses need a matching action space
    "algo": {"bpo.trust_region_delta", "reinforce.gamma"},
    "bpo.clip_targets": {"reinforce.gamma"},  # clipped targets need gamma < 1
}
# Messages say what is allowed.
ALLOWED_WORDS = re.compile(r"\bmust\b|\ballowed\b|\bone of\b|\bleave it\b|\bneeds\b")
# Float fields for which inf is documented as meaningful ("inf disables it", "inf: none").
INF_ALLOWED = {
    "bpo.rho_bar", "bpo.c_bar", "bpo.q_max_grad_norm", "bpo.mu_max_grad_norm", "ppo.max_grad_norm",
    "bpo.trust_region_delta",
}
BOOL_FIELDS = sorted({n for fields in FIELDS.values() for n, hint in fields.items() if hint is bool})
WIDTH_FIELDS = ("ppo.pi_hidden", "ppo.vf_hidden", "bpo.q_hidden", "bpo.mu_hidden")
# Fields checked by validation._positive (a number > 0).
POSITIVE_FIELDS = (
    "ppo.learning_rate", "ppo.clip_range", "ppo.max_grad_norm", "ppo.adam_eps", "reinforce.lr_start",
    "reinforce.lr_end", "bpo.rho_bar", "bpo.c_bar", "bpo.q_lr", "bpo.mu_lr", "bpo.adam_eps", "bpo.q_max_grad_norm",
    "bpo.mu_max_grad_norm", "bpo.q_hat_floor", "bpo.trust_region_delta",
)
HUGE = 10**400  # an int beyond float range


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _too_big_for_float(value):
    return _is_number(value) and isinstance(value, int) and abs(value) > sys.float_info.max


# ---------------------------------------------------------------------------------------------
# Gaps of bpo.validation found by these tests (reported to the lead; remove an entry when fixed)
# ---------------------------------------------------------------------------------------------


class Gap(NamedTuple):
    fields: tuple[str, ...]
    covers: Callable[[object], bool]  # the values of those fields the gap is about
    repro: object  # a minimal value: validate(preset with field = repro) should raise ConfigError
    reason: str
    kinds: tuple[type, ...] = (EpisodicTrainConfig, OnPolicyTrainConfig)
    repro_for: dict | None = None  # per-field repro where ``repro`` does not show the gap


KNOWN_GAPS = [
    # validate raises something other than ConfigError.
    Gap(WIDTH_FIELDS, lambda v: _is_number(v) or isinstance(v, bool), 64,
        "crash: validation._widths iterates over a non-tuple: TypeError: 'int' object is not iterable"),
    Gap(POSITIVE_FIELDS, lambda v: _too_big_for_float(v) and v > 0, HUGE,
        "crash: validation._positive calls math.isnan on an int beyond float range: OverflowError"),
    # validate returns a config with a value of the wrong type or range.
    Gap(tuple(BOOL_FIELDS), lambda v: not isinstance(v, bool), "no",
        "accepted: bool fields are not validated; any value passes ('no' is truthy)",
        repro_for={"ppo.use_sde": 0}),  # truthy values meet the discrete-action check of CartPole
    Gap(("ppo.log_std_init",), lambda v: True, math.nan,
        "accepted: ppo.log_std_init is not validated (nan, 'x', None pass)"),
    Gap(("bpo.lam",), lambda v: True, math.nan,
        "accepted: bpo.lam is validated for episodic configs only (on-policy: nan, 'x', None pass)",
        kinds=(OnPolicyTrainConfig,)),
    Gap(("preset",), lambda v: not isinstance(v, str), None, "accepted: preset (a label) is not validated"),
    Gap(("variant",), lambda v: not isinstance(v, str) and not v, None,
        "accepted: `if cfg.variant:` skips the check for falsy non-strings (None, False, 0, ())"),
    Gap(("seed", "ppo.gamma", "ppo.gae_lambda", "reinforce.gamma", "bpo.lam", "bpo.polyak_tau", "bpo.symlog_reg_coef",
         "bpo.ppo_ent_coef", "ppo.sde_sample_freq"), lambda v: isinstance(v, bool), False,
        "accepted: bools pass as numbers (_in_unit_interval and the checks of seed, symlog_reg_coef, ppo_ent_coef and "
        "sde_sample_freq do not exclude bool, unlike _positive and _positive_int)",
        repro_for={"ppo.sde_sample_freq": True}),
    Gap(WIDTH_FIELDS, lambda v: isinstance(v, tuple) and any(isinstance(w, bool) for w in v), (True,),
        "accepted: _widths takes bools as widths ((True,) is a width of 1)"),
    Gap(("ppo.ent_coef", "ppo.vf_coef", "bpo.symlog_reg_coef", "bpo.ppo_ent_coef"),
        lambda v: _is_number(v) and (_too_big_for_float(v) or math.isinf(v)), math.inf,
        "accepted: loss coefficients are only checked >= 0: inf and ints beyond float range pass"),
    Gap(("ppo.kl_coef",), _too_big_for_float, HUGE,
        "accepted: ppo.kl_coef checks `< math.inf`, which an int beyond float range passes"),
]


def known_gap(cfg, name, value):
    for gap in KNOWN_GAPS:
        if name in gap.fields and isinstance(cfg, gap.kinds) and gap.covers(value):
            return gap
    return None


# ---------------------------------------------------------------------------------------------
# The property
# ---------------------------------------------------------------------------------------------


def type_problem(name, hint, value):
    """Why ``value`` is not a valid value of a field declared ``hint``; None if it is."""
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
    hint = FIELDS[type(cfg)][name]
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
    for name, hint in FIELDS[type(cfg)].items():
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
    for name in FIELDS[type(base)]:
        for value in EDGE_VALUES:
            cfg = replace(base, **{name: value})
            if known_gap(cfg, name, value):
                continue
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
    value = data.draw(field_values(FIELDS[type(base)][name]), label=name)
    cfg = replace(base, **{name: value})
    if known_gap(cfg, name, value):
        return  # reported; test_known_gap holds its reproduction
    check_validate(cfg, name, value)


@pytest.mark.parametrize("preset", ["cartpole_ppo", "short_corridor"])
@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_validate_several_fields(preset, data):
    """Several fields at once, each drawn like above: a ConfigError must name one of them (or a
    field they constrain)."""
    base = get_preset(preset)
    fields = FIELDS[type(base)]
    names = data.draw(st.lists(st.sampled_from(sorted(fields)), min_size=2, max_size=5, unique=True), label="fields")
    changes = {name: data.draw(field_values(fields[name]), label=name) for name in names}
    cfg = replace(base, **changes)
    if any(known_gap(cfg, name, value) for name, value in changes.items()):
        return
    try:
        validate(cfg)
    except ConfigError as e:
        allowed = set(names).union(*(CROSS_FIELD.get(name, set()) for name in names))
        assert e.field_name in allowed, f"setting {changes}: the error names {e.field_name!r}: {e}"
        assert ALLOWED_WORDS.search(str(e)), str(e)
        return
    for name, value in changes.items():
        problem = type_problem(name, fields[name], value)
        assert problem is None, f"validate accepted {problem} (changes: {changes})"


def _gap_cases():
    """One reproduction per gap and field, on the first of cartpole_ppo and short_corridor where
    the gap is the first one to cover it."""
    for gap in KNOWN_GAPS:
        for name in gap.fields:
            value = (gap.repro_for or {}).get(name, gap.repro)
            for preset in ("cartpole_ppo", "short_corridor"):
                base = get_preset(preset)
                if name in FIELDS[type(base)] and known_gap(base, name, value) is gap:
                    shown = "10**400" if value == HUGE else repr(value)
                    yield pytest.param(preset, name, value, id=f"{preset}-{name}-{shown}",
                                       marks=pytest.mark.xfail(strict=True, reason=gap.reason))
                    break
            else:
                raise AssertionError(f"no preset reproduces {gap.reason} for {name}")


GAP_CASES = list(_gap_cases())


@pytest.mark.parametrize(("preset", "name", "value"), GAP_CASES)
def test_known_gap(preset, name, value):
    """Minimal reproductions of KNOWN_GAPS: validate should raise ConfigError naming the field."""
    with pytest.raises(ConfigError) as info:
        validate(replace(get_preset(preset), **{name: value}))
    assert info.value.field_name == name


# --- the command line (invalid values only: nothing may train) --------------------------------


def run_cli(argv):
    """``bpo.cli.main(argv)`` with its output captured: (exit status, stdout + stderr)."""
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
    ("--bpo.c-bar", "bpo.c_bar", float, lambda x: x > 0),  # inf allowed
    ("--ppo.gamma", "ppo.gamma", float, lambda x: 0 <= x < 1),
    ("--bpo.traj", "bpo.traj", str, lambda s: s in ("per_decision", "traj", "traj_shifted")),
    ("--seeds", "seeds", int, lambda n: n >= 1),
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
        assert len(errors) == 1 and any(errors[0].startswith(f"error: {f}: ") for f in allowed), output
    assert not any(out_dir.iterdir()), "nothing may be written"
