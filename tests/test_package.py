"""The distribution as the package index would see it: the wheel's and the sdist's names,
metadata, licence and description, built from this checkout with hatchling (issue 29)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

import chatbridge
from tests.servers import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]
# What only this repository has: a pip user's page must not send them there.
REPOSITORY_ONLY = ["make run", "make test", "../shared", "DESIGN.md", "chatbridge.asgi", ".venv"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel and the sdist, built into a temporary directory."""
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(dist)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    return wheel, sdist


def metadata(wheel: Path) -> tuple[Message, list[str]]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        text = archive.read(f"django_chatbridge-{VERSION}.dist-info/METADATA").decode()
    return Parser().parsestr(text), names


def test_the_wheel_is_django_chatbridge_licensed_bsd_3_clause(built: tuple[Path, Path]) -> None:
    wheel, _ = built
    assert wheel.name == f"django_chatbridge-{VERSION}-py3-none-any.whl"
    meta, names = metadata(wheel)
    assert meta["Name"] == "django-chatbridge" and meta["Version"] == VERSION
    assert meta["License-Expression"] == "BSD-3-Clause"  # PEP 639
    assert meta.get_all("License-File") == ["LICENSE"]
    assert f"django_chatbridge-{VERSION}.dist-info/licenses/LICENSE" in names
    assert meta["Author"] == "The ChatBridge developers"
    classifiers = meta.get_all("Classifier") or []
    assert {"Framework :: Django :: 5.2", "Typing :: Typed"} <= set(classifiers)
    assert meta["Requires-Python"] == ">=3.11"
    assert {"production", "redis", "postgres", "all"} <= set(meta.get_all("Provides-Extra") or [])
    # The package and its type marker; not this repository's demo site.
    assert "chatbridge/py.typed" in names and "chatbridge/__init__.py" in names
    # The French translation, compiled: the pages' words and the chat scripts' (docs/languages.md).
    catalog = "chatbridge/chat/locale/fr/LC_MESSAGES"
    assert {f"{catalog}/django.mo", f"{catalog}/djangojs.mo"} <= set(names)
    assert not any(n in names for n in ("chatbridge/settings.py", "chatbridge/asgi.py"))
    assert not any(n.startswith(("plugins/", "tests/", "bench/")) for n in names)


def test_the_description_is_written_for_pip_users(built: tuple[Path, Path]) -> None:
    meta, _ = metadata(built[0])
    assert meta["Description-Content-Type"] == "text/markdown"
    description = meta.get_payload()
    assert isinstance(description, str)
    assert description.strip() == (ROOT / "PACKAGE.md").read_text().strip()
    assert 'pip install "django-chatbridge[production]"' in description
    assert [s for s in REPOSITORY_ONLY if s in description] == []


def test_the_sdist_carries_the_licence_the_changelog_and_the_guides(
    built: tuple[Path, Path],
) -> None:
    _, sdist = built
    assert sdist.name == f"django_chatbridge-{VERSION}.tar.gz"
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"LICENSE", "CHANGELOG.md", "PACKAGE.md", "docs/install.md", "pyproject.toml"} <= names
    assert "chatbridge/py.typed" in names


def test_the_version_comes_from_the_installed_distribution() -> None:
    """``chatbridge.__version__`` is the installed metadata's (an editable install here), the
    one the changelog's latest entry names."""
    assert chatbridge.__version__ == VERSION
    assert f"## {VERSION} " in (ROOT / "CHANGELOG.md").read_text()
