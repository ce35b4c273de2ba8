"""``--help`` texts without the source's line breaks.

tyro takes each field's help from its docstring and keeps a line break wherever the next line
starts with anything but a letter, which it checks before removing the indentation: every
continuation line of an indented docstring starts with spaces, so every source line break
survives, and the formatter then wraps each source line again at the terminal's width (ragged
lines of a few words). ``reflow`` joins the lines of each paragraph first; blank lines still end
a paragraph and list items (``- ``, ``* ``, ``1. ``) still start a line.
"""

from __future__ import annotations

import inspect
import re

from tyro import _docstrings

_ITEM = re.compile(r"([-*] |\d+\. )")


def reflow(doc: str) -> str:
    """``doc`` with the lines of each paragraph joined by spaces (blank lines and list items kept)."""
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            line = line.strip()
            if lines and not _ITEM.match(line):
                lines[-1] += " " + line
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def install() -> None:
    """Make tyro read every field's help through ``reflow`` (its ``get_field_docstring``, which its
    dataclass support looks up on its module at each call). A tyro without that function keeps
    its own texts: ``tests/test_docs.py`` checks the rendered help."""
    original = getattr(_docstrings, "get_field_docstring", None)
    if original is None or getattr(original, "reflowed", False):
        return

    def get_field_docstring(*args, **kwargs):
        doc = original(*args, **kwargs)
        return None if doc is None else reflow(doc)

    get_field_docstring.reflowed = True
    _docstrings.get_field_docstring = get_field_docstring
