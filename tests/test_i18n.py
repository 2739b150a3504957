"""The chat speaks the browser's language (issue 29, point 6): pages through LocaleMiddleware,
the socket's fragments and the forms' refusals in the same language, the scripts' words through
Django's JavaScript catalog; the French catalog shipped is complete and compiled."""

from __future__ import annotations

import gettext
import shutil
import subprocess
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation
from pydantic import BaseModel, Field, ValidationError

from chatbridge.author.human import human_value, pydantic_messages
from tests.chat_client import ChatClient, html_socket
from tests.messages import CATALOGS, ROOT, SOURCES, make_messages

FRENCH = (b"accept-language", b"fr-FR,fr;q=0.9,en;q=0.5")


def _copy_sources(target: Path) -> None:
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target / name)


def _statistics(po: Path) -> str:
    """msgfmt's count of a catalog (checked: placeholders agree with their msgid)."""
    done = subprocess.run(
        ["msgfmt", "--check", "--statistics", "-o", "/dev/null", str(po)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stderr.strip()


def test_every_marked_string_has_its_french_translation(tmp_path: Path) -> None:
    """Extracted again from the tree (as ``make messages`` does), every catalog's strings are
    translated: nothing new is left in English, nothing is fuzzy, placeholders agree."""
    _copy_sources(tmp_path)
    make_messages(tmp_path)
    found = sorted(tmp_path.glob("**/locale/fr/LC_MESSAGES/*.po"))
    assert {str(p.relative_to(tmp_path).parents[2]) for p in found} == set(CATALOGS)
    assert any(p.name == "djangojs.po" for p in found)  # the chat's scripts
    for po in found:
        counts = _statistics(po)
        assert "untranslated" not in counts and "fuzzy" not in counts, (
            f"{po.relative_to(tmp_path)}: {counts} (run make messages and translate)"
        )


SHIPPED = sorted(str(p.relative_to(ROOT)) for c in CATALOGS for p in (ROOT / c).glob("fr/*/*.po"))


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_compiled_catalog_is_its_source(name: str, tmp_path: Path) -> None:
    po = ROOT / name
    mo = tmp_path / "fresh.mo"
    subprocess.run(["msgfmt", "-o", str(mo), str(po)], check=True)
    with po.with_suffix(".mo").open("rb") as shipped, mo.open("rb") as fresh:
        assert gettext.GNUTranslations(shipped)._catalog == gettext.GNUTranslations(fresh)._catalog  # type: ignore[attr-defined]


def test_refusals_and_values_are_in_the_active_language() -> None:
    class Visit(BaseModel):
        name: str
        rating: int = Field(ge=1, le=5)

    with pytest.raises(ValidationError) as refused:
        Visit.model_validate({"rating": 9})
    errors = refused.value.errors(include_context=True)
    assert pydantic_messages(errors, Visit) == [
        "This field is required",
        "Enter a number from 1 to 5",
    ]
    with translation.override("fr"):
        assert pydantic_messages(errors, Visit) == [
            "Ce champ est obligatoire",
            "Saisissez un nombre de 1 à 5",
        ]
        assert human_value("2026-05-31") == "31 mai 2026"
        assert human_value([True, False]) == "Oui et Non"
    assert human_value("2026-05-31") == "31 May 2026"


@pytest.mark.django_db
def test_a_page_speaks_the_browsers_language() -> None:
    client = Client()
    french = client.get("/", HTTP_ACCEPT_LANGUAGE="fr-FR,fr;q=0.9", follow=True)
    assert french.status_code == 200
    assert french["Content-Language"] == "fr"
    assert "Accept-Language" in french["Vary"]
    page = french.content.decode()
    assert '<html lang="fr">' in page
    assert "Nouvelle discussion" in page and "New chat" not in page
    english = Client().get("/", HTTP_ACCEPT_LANGUAGE="en-GB,en;q=0.9", follow=True)
    assert '<html lang="en">' in english.content.decode()
    assert "New chat" in english.content.decode()
    # An unknown language gets the site's own (English), never an error.
    other = Client().get("/", HTTP_ACCEPT_LANGUAGE="xx", follow=True)
    assert other.status_code == 200 and other["Content-Language"] == "en"


@pytest.mark.django_db
def test_the_chat_scripts_words_come_in_the_pages_language() -> None:
    client = Client()
    french = client.get(reverse("chatbridge:jsi18n"), HTTP_ACCEPT_LANGUAGE="fr")
    assert french.status_code == 200
    assert french["Content-Type"].startswith("text/javascript")
    script = french.content.decode()
    assert '"Connected": "Connect\\u00e9"' in script or '"Connected": "Connecté"' in script
    english = Client().get(reverse("chatbridge:jsi18n"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '"Connected"' not in english  # English is the scripts' own text


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_runtime")
async def test_a_socket_speaks_the_language_its_handshake_asks_for() -> None:
    assert "Rechargez la page" in await refusal_of_bad_json(FRENCH)
    assert "Reload the page and try again." in await refusal_of_bad_json()


async def refusal_of_bad_json(*headers: tuple[bytes, bytes]) -> str:
    """The error fragment a socket opened with ``headers`` draws for a frame that is not JSON."""
    socket = await html_socket(*headers)
    try:
        await socket.send_to(text_data="{not json")
        while 'role="alert"' not in (frame := await socket.receive_from(timeout=10)):
            pass
        return frame
    finally:
        await socket.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_runtime")
async def test_the_engines_refusals_come_in_the_sockets_language() -> None:
    """A message sent while a tool waits is refused by the engine in the socket's language."""
    chat = await ChatClient.start(headers=(FRENCH,))
    try:
        await chat.send_user("Book a flight from JFK to LAX")
        await chat.next("elicit", key="pick_flight")
        await chat.send_user("hello?")
        error = await chat.next("error")
        assert (error["code"], error["message"]) == (
            "BUSY",
            "Attendez la fin de la réponse en cours, ou interrompez l’outil en cours.",
        )
    finally:
        await chat.close()
