"""MkDocs hook of the documentation site (mkdocs.yml ``hooks:``): the docstrings' Sphinx roles as code and links.

graphscale's docstrings cross-reference with Sphinx roles (``:func:`graphscale.run.run```, ``:class:`~.plan.Plan```),
which Markdown renders as the role's text followed by the code span. This hook drops the role, shortens a ``~``
target to its last name as Sphinx does, and turns an absolute ``graphscale.`` target into an *optional*
mkdocs-autorefs link: a link where the API reference documents the object, plain code (and no warning) where it does
not, so ``mkdocs build --strict`` still fails only on the references mkdocs itself checks.
"""

from __future__ import annotations

import html
import re

#: ``:role:<code>target</code>`` as Markdown renders ``:role:`target```
ROLE = re.compile(r":(?:py:)?(func|class|meth|attr|mod|data|exc|obj|const|envvar|math):<code>(~?)([^<]*)</code>")


def _replace(match: re.Match) -> str:
    role, tilde, target = match.group(1), match.group(2), match.group(3).strip()
    shown = target.lstrip(".").rsplit(".", 1)[-1] if tilde else target
    identifier = html.unescape(target).removesuffix("()")
    if role in {"math", "envvar"} or not identifier.startswith("graphscale."):
        return f"<code>{shown}</code>"
    return f'<autoref optional identifier="{html.escape(identifier, quote=True)}"><code>{shown}</code></autoref>'


def sphinx_roles_to_autorefs(text: str) -> str:
    """``text`` (a page's HTML) with every Sphinx role rendered as code, linked where it names a graphscale object."""
    return ROLE.sub(_replace, text)


def on_page_content(html_text: str, **kwargs) -> str:
    return sphinx_roles_to_autorefs(html_text)
