"""The real-client tier (marker ``js``): Queen's own JavaScript client, npm ``queen-mq`` 0.15.0 unchanged,
against ``queenpy serve``. ``.ci/run`` installs it (``npm install`` of
``../shared/vendor/queen-mq-0.15.0.tgz`` into ``tests/js/node_modules``; axios, pg and uuid come from the
registry) and Node.js from Debian.

- ``client.test.mjs`` and ``streams.test.mjs`` run under Node's own test runner (``node --test``) with
  ``QUEEN_URL`` pointing at the session broker;
- ``use_case_pipeline.mjs`` is Queen's transactional-pipeline recipe (its
  ``examples/use-case-pipeline.js``, as issue 38 describes it) with its own stop rule; its counts at the stop
  moment are asserted here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
CLIENT = HERE / "node_modules" / "queen-mq" / "package.json"

pytestmark = [
    pytest.mark.js,
    pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js 20+ (Debian package nodejs)"),
    pytest.mark.skipif(
        not CLIENT.exists(),
        reason="needs the queen-mq JS client in tests/js/node_modules: "
        "npm install --prefix tests/js ../shared/vendor/queen-mq-0.15.0.tgz (see .ci/run)",
    ),
]


def node(*args: str, url: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", *args],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "QUEEN_URL": url},
        check=False,
    )


def test_the_js_client_suite_passes(broker: Any) -> None:
    """push/pop/ack, consumer groups and subscriptions, batch(n).each() with onError nacks and the DLQ,
    transactions, renewLease, buffer(), the admin API."""
    done = node("--test", "--test-reporter=spec", "client.test.mjs", url=broker.url, timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ℹ fail 0" in done.stdout and "ℹ pass 7" in done.stdout, done.stdout


def test_the_js_streams_sdk_windows_count_exactly(broker: Any) -> None:
    done = node("--test", "--test-reporter=spec", "streams.test.mjs", url=broker.url, timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ℹ fail 0" in done.stdout and "ℹ pass 2" in done.stdout, done.stdout


def test_queens_pipeline_script_passes_by_its_own_stop_rule(broker: Any) -> None:
    """At the moment the 86th notify is counted: 86 routed, 86 notified, every poison message in the DLQ after
    its three attempts (retryLimit 2, redelivered at once as in Queen)."""
    done = node("use_case_pipeline.mjs", broker.url, url=broker.url, timeout_s=180)
    assert done.returncode == 0, done.stdout + done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    at_stop = json.loads(line.removeprefix("RESULT "))
    assert at_stop["routed"] == 86 and at_stop["notified"] == 86, at_stop
    assert at_stop["dlq"] == 14, at_stop
    assert at_stop["translateAttempts"] >= 128 and at_stop["translateFailures"] == 42, at_stop
