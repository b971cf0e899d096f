"""The browser tier (marker ``browser``, not in the default run): the console at ``/`` driven by Playwright in
Debian's Chromium against real ``queenpy serve`` processes.

Needs ``pip install -e ".[test,browser]"`` and ``apt-get install -y chromium`` (Playwright's own browser
download is not used; ``QUEENPY_CHROMIUM`` overrides the executable). Without the Playwright package the
tier's modules are not collected, so the default run does not need it.

Fixtures:
    chromium      session: the browser
    console       function: ``console(broker, token=None)`` -> a Page of a fresh context at the console
    api           function: ``api(broker, token=None)`` -> an httpx.Client on the broker (what the page
                  must agree with)
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

if importlib.util.find_spec("playwright") is None:  # the `browser` extra is not installed
    collect_ignore_glob = ["test_*.py"]

CHROMIUM = os.environ.get("QUEENPY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set QUEENPY_CHROMIUM)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def console(chromium: Any) -> Iterator[Callable[..., Any]]:
    contexts: list[Any] = []

    def open_console(broker: Any, path: str = "/", token: str | None = None) -> Any:
        context = chromium.new_context(viewport={"width": 1400, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.console_errors = errors
        if token is not None:  # the console keeps the token in sessionStorage, per tab
            context.add_init_script(f"sessionStorage.setItem('queenpy.console.token', {token!r})")
        page.goto(broker.url + path)
        return page

    yield open_console
    for context in contexts:
        context.close()


@pytest.fixture
def api() -> Iterator[Callable[..., httpx.Client]]:
    clients: list[httpx.Client] = []

    def client(broker: Any, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        made = httpx.Client(base_url=broker.url, headers=headers, timeout=30)
        clients.append(made)
        return made

    yield client
    for made in clients:
        made.close()
