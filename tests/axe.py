"""axe-core in the browser tests: every frame of a page checked, serious and moderate fail.

axe-core (tests/clients/node_modules/axe-core, pinned by tests/clients/package-lock.json and
installed by ``make npm-clients``) is added to every document of a browser context before the
document's own scripts run (Playwright's init scripts go through the DevTools protocol, so the
guest UIs' strict Content-Security-Policy and sandbox do not stop it). ``check`` then runs axe
in each frame of the page on its own (a sandboxed guest has an opaque origin, which axe's
frame messaging would refuse) and fails listing every violation of impact serious or moderate:
rule id, impact, help text and the nodes it found, by frame. The experimental rule
label-content-name-mismatch (a control's accessible name must contain its visible text) is
switched on as well.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page

from tests.servers import ROOT

AXE = ROOT / "tests" / "clients" / "node_modules" / "axe-core" / "axe.min.js"
AXE_VERSION = "4.14.1"
FAILING = ("serious", "moderate", "critical")

RUN = """async () => {
  if (!window.axe) { return null; }
  const result = await window.axe.run(document, {
    resultTypes: ["violations"], iframes: false,
    rules: { "label-content-name-mismatch": { enabled: true } },
  });
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map((n) => ({ target: n.target.join(" "), summary: n.failureSummary })),
  }));
}"""


def axe_source() -> str:
    """axe.min.js, or a failure saying how to install it."""
    if not AXE.is_file():
        pytest.fail(
            f"axe-core is missing ({AXE.relative_to(ROOT)}): run `make npm-clients` to install "
            f"the pinned axe-core {AXE_VERSION}"
        )
    return AXE.read_text(encoding="utf-8")


async def axe_context(browser: Browser, scheme: str = "light", **options: Any) -> BrowserContext:
    """A browser context in ``scheme`` (light or dark) whose every document carries axe.

    Motion is reduced so that no transition is caught half-way by the contrast checks."""
    context = await browser.new_context(color_scheme=scheme, reduced_motion="reduce", **options)  # type: ignore[arg-type]
    await context.add_init_script(script=axe_source())
    return context


async def violations(page: Page) -> list[str]:
    """Every serious or moderate violation in any frame of ``page``, one line each."""
    found: list[str] = []
    for frame in page.frames:
        if frame.is_detached() or frame.url in ("", "about:blank"):
            continue
        result = await frame.evaluate(RUN)
        if result is None:
            found.append(f"{frame.url}: axe-core was not loaded in this frame")
            continue
        for rule in result:
            if rule["impact"] not in FAILING:
                continue
            where = "" if frame is page.main_frame else f" [frame {frame.url}]"
            nodes = "; ".join(f"{n['target']}: {n['summary']}" for n in rule["nodes"])
            found.append(f"{rule['id']} ({rule['impact']}){where}: {rule['help']} -> {nodes}")
    return found


async def check(page: Page, state: str) -> None:
    """Fail when axe finds a serious or moderate violation on ``page`` in ``state``."""
    found = await violations(page)
    if found:
        listing = "\n  ".join(found)
        pytest.fail(f"axe-core: {len(found)} violation(s) in {state!r}:\n  {listing}")
