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
from collections import Counter

import tyro


def list_options(cls) -> dict[str, str]:
    """{flag: field name} for the fields of the dataclass ``cls`` that take several values (a
    variable-length tuple), under both spellings tyro accepts (``--dry-run``, ``--dry_run``)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)
             if any(typing.get_origin(t) is tuple and typing.get_args(t)[-1:] == (Ellipsis,)
                    for t in (hints[f.name], *typing.get_args(hints[f.name])))]
    return {f"--{spelling}": name for name in names for spelling in (name.replace("_", "-"), name)}


def repeated_list_options(cls, argv: list[str]) -> list[str]:
    """The list options of ``cls`` (``list_options``) that ``argv`` gives more than once, by field name."""
    options = list_options(cls)
    counts = Counter(options[flag] for token in argv if (flag := token.split("=", 1)[0]) in options)
    return sorted(name for name, n in counts.items() if n > 1)


def parse(cls, argv: list[str], prog: str, **kwargs):
    """``tyro.cli(cls, args=argv, prog=prog, **kwargs)``, after refusing a repeated list option
    (exit 2 with a message naming it, as tyro's own errors)."""
    repeated = repeated_list_options(cls, argv)
    if repeated:
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in repeated)
        example = f"--{repeated[0].replace('_', '-')} A B"
        print(f"error: {prog}: {flags} given more than once; only the last would count. Give all the values "
              f"after one flag, e.g. {example}.", file=sys.stderr)
        raise SystemExit(2)
    return tyro.cli(cls, args=argv, prog=prog, **kwargs)
