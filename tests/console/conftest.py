import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))

from console_support import CHROMIUM, Served  # noqa: E402


@pytest.fixture
def served():
    """Start processes with ``served(Served(...))``; all are stopped at the end."""
    started: list[Served] = []

    def start(s: Served) -> Served:
        started.append(s)
        return s.start()

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium through Playwright, one per test module: Playwright's sync API keeps
    an event loop running in the thread while it is open, so it must be closed before a test
    of another module (which may call asyncio.run) runs on the same worker."""
    from playwright.sync_api import sync_playwright
    if not Path(CHROMIUM).exists():
        raise RuntimeError("chromium is not installed: apt-get install chromium (make test "
                           "does it)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    # bypass_csp: Playwright evaluates its waits as strings, which the console's CSP forbids;
    # without the CSP the XSS test also checks that escaping alone keeps scripts out
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    pg = ctx.new_page()
    yield pg
    ctx.close()
