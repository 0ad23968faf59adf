"""A griffe extension for the API reference (mkdocs.yml): the docstrings use reST roles
(:class:`X`, :meth:`~a.b.f`), which Markdown would show as ``:class:`` before the name.
It keeps the name as code: ``:class:`~a.b.C``` becomes ```C```, ``:func:`a.f``` ```a.f```.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def _plain(match: re.Match[str]) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1]}`" if match.group(1) else f"`{name}`"


class ReSTRoles(griffe.Extension):
    """Rewrites reST roles in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_plain, obj.docstring.value)
