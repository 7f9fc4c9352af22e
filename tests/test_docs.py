"""The README and docs/: relative links resolve, the set-up stays two commands, the Python examples parse,
and the API reference covers the public modules.

The documentation build itself (Sphinx, warnings as errors) runs in `make test` through `make docs`.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _unfenced(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code."""
    return re.sub(r"`[^`\n]*`", "", _unfenced(text))


def _slug(heading: str) -> str:
    """GitHub's (and MyST's) anchor of a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    headings = re.finditer(r"^#{1,6} (.+)$", _unfenced(page.read_text()), re.M)
    return {_slug(m.group(1)) for m in headings}


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    links = [u for u in LINK.findall(_prose(page.read_text())) if not re.match(r"[a-z]+:", u)]
    broken = []
    for url in links:
        path, _, anchor = url.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(url)
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(url)
    assert not broken, f"{page.name}: links that do not resolve: {broken}"


def test_readme_setup_is_two_commands():
    text = README.read_text()
    setup = re.search(r"^## Set-up\n(.*?)^## ", text, re.S | re.M).group(1)
    block = re.search(r"^```\n(.*?)^```", setup, re.S | re.M).group(1)
    assert [line.split("#")[0].strip() for line in block.strip().splitlines()] == ["make demo", "make test"]


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_parse(page):
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)
    assert page != README or len(blocks) >= 5
    for block in blocks:
        ast.parse(block)


def test_api_reference_covers_public_modules():
    documented = set()
    for rst in (ROOT / "docs" / "api").glob("*.rst"):
        documented |= set(re.findall(r"^\.\. automodule:: (\S+)", rst.read_text(), re.M))
    modules = {"strata", "strata.lossy", "strata.checkpoint", "strata.comm", "strata.numcodecs", "strata.zarr",
               "strata.xarray", "strata.cf", "strata.quality", "strata.enhance", "strata.errors", "strata.metrics",
               "strata.atomic", "strata.dominance"}
    assert modules <= documented


def test_readme_stays_short():
    # A newcomer reads it in two minutes: measurement logs and per-target notes belong in docs/.
    assert len(README.read_text().splitlines()) <= 200
