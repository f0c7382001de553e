"""The README and the docs/ guide against the code and the file tree.

`scripts/docs.sh` (run by `.ci/run`) builds the site with `mkdocs build --strict`, which checks the links inside
docs/; these tests check what mkdocs does not see, and run with the suite: every relative link of README.md (and of
the docs pages) names a file that exists, every registered strategy has its page, in the site's navigation and in
the README's table, and each strategy page's Options table lists exactly the options the strategy declares.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from graphscale.registry import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: ``[text](target)`` outside code spans; images too
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
#: an options-table row: ``| `--name ...` | default | what |``, ``--flag`` / ``--no-flag`` pairs in one cell
OPTION_ROW = re.compile(r"^\|\s*`--([a-z0-9-]+)")


def _links(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # fenced code
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code
    return LINK.findall(text)


def _broken_relative_links(page: Path) -> list[str]:
    broken = []
    for target in _links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):  # a URL or an anchor in the page
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    return broken


def test_readme_relative_links_resolve_to_files():
    links = _links((ROOT / "README.md").read_text())
    assert any(link.startswith("docs/") for link in links), "README.md should link into docs/"
    assert _broken_relative_links(ROOT / "README.md") == []


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")), ids=lambda p: str(p.relative_to(DOCS)))
def test_docs_relative_links_resolve_to_files(page):
    assert _broken_relative_links(page) == []


def test_link_check_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[ok](page.md) [gone](missing.md#x) `[code](nowhere.md)` [web](https://example.org) [a](#b)\n")
    assert _broken_relative_links(page) == ["missing.md#x"]


def _nav_pages() -> set[str]:
    text = re.sub(r"^\s*#.*$", "", (ROOT / "mkdocs.yml").read_text(), flags=re.MULTILINE)  # comments
    return set(re.findall(r"([\w/.-]+\.md)\s*$", text, flags=re.MULTILINE))


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists():
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert _nav_pages() == pages


def test_every_strategy_has_a_page_in_the_nav_and_a_readme_row():
    readme = (ROOT / "README.md").read_text()
    nav = _nav_pages()
    for name in STRATEGIES.names():
        assert (DOCS / "strategies" / f"{name}.md").is_file(), name
        assert f"strategies/{name}.md" in nav, name
        assert f"[`{name}`](docs/strategies/{name}.md)" in readme, name


def _documented_options(page: Path) -> set[str]:
    section = page.read_text().split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    return {OPTION_ROW.match(line).group(1).replace("-", "_") for line in section.splitlines()
            if OPTION_ROW.match(line)}


@pytest.mark.parametrize("name", STRATEGIES.names())
def test_strategy_page_lists_exactly_the_declared_options(name):
    declared = set(STRATEGIES.get(name).options)
    assert _documented_options(DOCS / "strategies" / f"{name}.md") == declared


def test_sphinx_roles_become_code_and_optional_links():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = ("see :func:<code>graphscale.run.run</code>, :class:<code>~graphscale.config.RunConfig</code>, "
            ":meth:<code>~.plan.Plan.build</code> and :math:<code>x^2</code>")
    assert hooks.sphinx_roles_to_autorefs(page) == (
        'see <autoref optional identifier="graphscale.run.run"><code>graphscale.run.run</code></autoref>, '
        '<autoref optional identifier="graphscale.config.RunConfig"><code>RunConfig</code></autoref>, '
        "<code>build</code> and <code>x^2</code>")
