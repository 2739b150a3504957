"""The documentation site (issue 29): Sphinx builds it from docs/ with warnings as errors, its
index reaches every page of the guide, and its reference documents every name of the public
API (``chatbridge.__all__``) from the docstrings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import chatbridge
from tests.servers import ROOT

pytestmark = pytest.mark.slow

DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-a", "-W", "--keep-going", "-q"]
        + ["-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_every_name_of_the_public_api_is_in_the_reference(site: Path) -> None:
    html = (site / "reference.html").read_text()
    documented = set(re.findall(r'id="chatbridge\.([A-Za-z_]+)"', html))
    assert [name for name in chatbridge.__all__ if name not in documented] == []
    assert 'id="chatbridge.testing.run_tool"' in html
    assert 'id="chatbridge.serving.get_asgi_application"' in html


def test_the_index_reaches_every_page_of_the_guide(site: Path) -> None:
    index = (site / "index.html").read_text()
    pages = sorted(p.stem for p in DOCS.glob("*.md") if p.stem not in ("README", "index"))
    assert [p for p in pages if f'href="{p}.html"' not in index] == []
    assert chatbridge.__version__ in index  # the title names the version documented
