"""Headless Chromium for the browser tests (Debian's chromium, no downloaded browser)."""

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
EXPECT_TIMEOUT_MS = 20_000


# Loaded, no HTMX request on its way, swapping or settling, and no transition running,
# looked at every frame: what a check or a screenshot needs of a portal page (its partials
# load on "load" or on a timer), without networkidle's 500 ms of quiet after every page.
SETTLED = """timeout => new Promise((resolve, reject) => {
  const deadline = performance.now() + timeout;
  const busy = () => document.readyState !== "complete"
    || document.querySelector(".htmx-request, .htmx-swapping, .htmx-settling") !== null
    || document.getAnimations().some(animation => animation.playState === "running");
  const look = () => {
    if (!busy()) resolve();
    else if (performance.now() > deadline) reject(new Error(`not settled in ${timeout} ms`));
    else requestAnimationFrame(look);
  };
  look();
})"""


def settle(page, timeout_ms: int = 15_000) -> None:
    """Wait until the page has settled (``SETTLED``); an evaluated function, which the
    Content-Security-Policy allows, unlike wait_for_function's strings."""
    page.evaluate(SETTLED, timeout_ms)


def screenshot(page, name: str, *, guide: str = "", full_page: bool | None = None) -> Path:
    """Save a screenshot to tests/artifacts/ (the whole page unless ``full_page`` says
    otherwise); one the user guide shows (``guide``: its file name there, the viewport
    only) also replaces docs/images/ when PORTAL_DOCS_SCREENSHOTS=1."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=not guide if full_page is None else full_page)
    if guide and os.environ.get("PORTAL_DOCS_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS_IMAGES / f"{guide}.png")
    return path


@pytest.fixture
def browser(monkeypatch):
    # Playwright's sync API keeps an event loop on this thread; the ORM calls in the test
    # are plain synchronous code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: apt-get install -y chromium (make test installs it as root)"
        )
    # Imported here: only browser tests need Playwright.
    from playwright.sync_api import expect, sync_playwright

    # Assertions wait on states, never fixed times; their ceiling is what a busy two-core
    # machine needs (5 s by default), reached only when something is really wrong.
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()
