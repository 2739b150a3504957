"""The plugin author guide (docs/): every Python sample runs, the blocks of a page in order,
sharing their names like one session; a block marked ``python fragment`` (a settings excerpt)
must at least compile. docs/install.md is run by tests/test_outside_project.py."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
# The guide's pages with samples; the site's index and reference pages are not run (their
# blocks are excerpts: a settings table, a protocol's frames, a tool in outline).
SITE_ONLY = (
    "index.md", "reference.md", "runtime.md", "chat.md", "mcp-server.md", "operators.md",
    "offline-model.md", "production.md", "configuration.md", "performance.md", "layout.md",
    "development.md",
)  # fmt: skip
PAGES = sorted(
    p for p in DOCS.glob("*.md") if p.name not in ("README.md", "install.md", *SITE_ONLY)
)
BLOCK = re.compile(r"^```python( fragment)?\n(.*?)^```", re.S | re.M)


def samples(page: Path) -> list[tuple[bool, Any]]:
    """(runs, compiled code) per block, compiled with the page's line numbers."""
    text = page.read_text()
    found = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start(2))
        code = "\n" * line + match[2]
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        found.append((match[1] is None, compile(code, str(page), "exec", flags=flags)))
    return found


async def run_page(page: Path, **names: Any) -> int:
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}", **names}
    ran = 0
    for runs, code in samples(page):
        if not runs:
            continue
        outcome = eval(code, namespace)  # noqa: S307 - the guide's own samples
        if inspect.iscoroutine(outcome):
            await outcome
        ran += 1
    return ran


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "mcp.md"], ids=lambda p: p.stem)
async def test_the_samples_of_the_page_run(page: Path) -> None:
    assert await run_page(page) >= 1 or page.name == "deploy.md"


async def test_the_package_page_s_sample_runs() -> None:
    """PACKAGE.md, the description the package index shows: its tool runs and is answered."""
    assert await run_page(DOCS.parent / "PACKAGE.md") == 1


async def test_the_mcp_page_s_client_answers_a_live_server(server: str) -> None:
    assert await run_page(DOCS / "mcp.md", SERVER=server) == 1


def test_the_guide_s_index_links_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    assert sorted(re.findall(r"\]\(([a-z]+\.md)\)", index)) == sorted(
        [p.name for p in PAGES] + ["install.md"]
    )
