"""A command's arguments, parsed by tyro with one refusal added: a list option given twice.

tyro reads ``--grid a=1,2 --grid b=3`` as ``--grid b=3``: the last occurrence of an option that
takes several values replaces the earlier ones, silently. A user who repeats ``--set`` or
``--grid`` as other command lines allow would run a sweep without the values they gave first, so
a repeated list option is refused, before any work, with the form that keeps them all.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
import warnings
from collections import Counter
from pathlib import Path

import tyro

from bpo.config.schema import ConfigError


def list_options(cls) -> dict[str, str]:
    """{flag: field name} for the fields of the dataclass ``cls`` that take several values (a
    variable-length tuple), under both spellings tyro accepts (``--dry-run``, ``--dry_run``)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)
             if any(typing.get_origin(t) is tuple and typing.get_args(t)[-1:] == (Ellipsis,)
                    for t in (hints[f.name], *typing.get_args(hints[f.name])))]
    return {flag: name for name in names for flag in _spellings(name)}


def repeated_list_options(cls, argv: list[str]) -> list[str]:
    """The list options of ``cls`` (``list_options``) that ``argv`` gives more than once, by field name."""
    options = list_options(cls)
    counts = Counter(options[flag] for token in argv if (flag := token.split("=", 1)[0]) in options)
    return sorted(name for name, n in counts.items() if n > 1)


def _spellings(name: str) -> tuple[str, str]:
    return f"--{name.replace('_', '-')}", f"--{name}"


def _kinds(cls) -> tuple[dict[str, str], set[str], str | None]:
    """The top-level fields of the dataclass ``cls``: ({flag: field} of those taking values, the
    flags of the boolean ones (``--x``, ``--no-x``), the positional path field or None)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    valued, booleans, positional = {}, set(), None
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if typing.get_origin(hint) is typing.Annotated and typing.get_args(hint)[0] is Path and any(
                "Positional" in repr(m) for m in typing.get_args(hint)[1:]):
            positional = f.name
        elif hint is bool:
            booleans |= {*_spellings(f.name), *_spellings(f"no_{f.name}")}
        else:
            valued |= dict.fromkeys(_spellings(f.name), f.name)
    return valued, booleans, positional


def _path_field(cls, name: str) -> bool:
    hint = typing.get_type_hints(cls, include_extras=True)[name]
    return hint is Path or Path in typing.get_args(hint)


def empty_path(cls, argv: list[str]) -> str | None:
    """The first path field of ``cls`` that ``argv`` gives an empty string (``--out ''``, ``bpo table
    "$UNSET"``), which a path reads as the current folder, to fill with a run's or a table's
    files; or None. An empty argument is the value of the option before it when that option takes
    a value (not a boolean flag, not ``--opt=value``), else the positional path. An option this
    does not know (``bpo train``'s config sections) takes one value."""
    valued, booleans, positional = _kinds(cls)
    many = set(list_options(cls).values())
    taking = None  # the field whose value comes next; "" for an unknown option's
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if _is_flag(arg):
            if eq and value == "" and flag in valued and _path_field(cls, valued[flag]):
                return valued[flag]
            taking = None if eq or arg in booleans else valued.get(flag, "")
            continue
        if arg == "" and (field := positional if taking is None else taking) and _path_field(cls, field):
            return field
        if taking not in many:
            taking = None
    return None


def _is_flag(arg: str) -> bool:
    if not arg.startswith("-") or arg in ("-", "--"):
        return False
    try:
        float(arg)  # a negative number is a value
        return False
    except ValueError:
        return True


def parse(cls, argv: list[str], prog: str, **kwargs):
    """``tyro.cli(cls, args=argv, prog=prog, **kwargs)``, after refusing a repeated list option
    (exit 2 with a message naming it, as tyro's own errors) and an empty path (a ConfigError
    naming the field)."""
    repeated = repeated_list_options(cls, argv)
    if repeated:
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in repeated)
        example = f"--{repeated[0].replace('_', '-')} A B"
        print(f"error: {prog}: {flags} given more than once; only the last would count. Give all the values "
              f"after one flag, e.g. {example}.", file=sys.stderr)
        raise SystemExit(2)
    if (empty := empty_path(cls, argv)) is not None:
        raise ConfigError(empty, "an empty path; allowed: a folder or file path ('.' for the current folder)")
    with warnings.catch_warnings():
        # A replayed config.json's wrongly typed value (traj "trajj") is a default tyro warns about
        # before our validation names the field and what is allowed, in one line.
        warnings.filterwarnings("ignore", message=r"The field .* but the default value", category=UserWarning)
        return tyro.cli(cls, args=argv, prog=prog, **kwargs)
