"""A griffe extension for the API reference: Sphinx roles in docstrings become links.

The docstrings of vault/ and buffers/ name other objects the Sphinx way
(``:class:`~vault.Vault```, ``:meth:`create```), which mkdocstrings would print as they are.
This extension, run by mkdocstrings when it loads the packages, rewrites each role into an
optional mkdocs-autorefs reference: a link where the object is rendered somewhere in the site,
plain code where it is not (a private helper), never a broken link. A relative name is
resolved as Python would resolve it in the docstring's scope (its class, its module and what
that module imports). ``~`` shows the last component only, as in Sphinx.

Configured in mkdocs.yml under the python handler::

    plugins:
      - mkdocstrings:
          handlers:
            python:
              options:
                extensions:
                  - tools/mkdocs_rst_roles.py:RstRoles
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj):`(~?)([^`<>]+)`")


def target(obj: griffe.Object, name: str) -> str | None:
    """The full path ``name`` names in the scope of ``obj``, or None when it names nothing."""
    head, _, rest = name.partition(".")
    if head in ("vault", "buffers"):  # a public path, as the API pages render it (resolved in
        return name  # the package, ``vault`` would be the module vault/vault.py or a member)
    try:
        path = obj.resolve(head)
    except (griffe.NameResolutionError, AttributeError, KeyError):
        path = None
    if path is None:
        return None
    return f"{path}.{rest}" if rest else path


def rewrite(obj: griffe.Object, text: str) -> str:
    """``text`` with every role a reference (see the module docstring)."""

    def one(match: re.Match[str]) -> str:
        short, name = match.group(1), match.group(2).strip()
        shown = name.rsplit(".", 1)[-1] if short else name
        path = target(obj, name)
        if path is None:
            return f"`{shown}`"
        return f'<autoref identifier="{path}" optional><code>{shown}</code></autoref>'

    return ROLE.sub(one, text)


class RstRoles(griffe.Extension):
    """Rewrites the roles of every docstring once the packages are loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = rewrite(obj, obj.docstring.value)
