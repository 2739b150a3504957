"""The documentation site (Sphinx, MyST for the Markdown pages, the furo theme), built by
``make docs`` with warnings as errors: ``sphinx-build -W docs docs/_build/html``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map

import chatbridge  # noqa: E402

project = "ChatBridge"
author = "The ChatBridge developers"
copyright = "2026, the ChatBridge developers"  # noqa: A001
release = chatbridge.__version__
version = release

# napoleon: the docstrings' "Args:" sections (Google style).
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# README.md is the guide's page of contents in the repository; the site's is index.md.
exclude_patterns = ["_build", "README.md"]
myst_heading_anchors = 3  # links to a page's sections (#2-settings)
# The pages link to files of the repository (tests, the package's modules) for readers of
# the source; on the site they are plain text, not broken links.
suppress_warnings = ["myst.xref_missing"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "furo"
html_title = f"ChatBridge {release}"


def setup(app: object) -> None:
    """The deployment page's HAProxy configuration is shown as plain text (Pygments has no
    HAProxy lexer; tests/balancer.py finds the block by its ``haproxy`` fence)."""
    from pygments.lexers.special import TextLexer

    app.add_lexer("haproxy", TextLexer)  # type: ignore[attr-defined]
