"""A chaos run: one private PostgreSQL, the chosen scenarios one after the other, a table and a JSON file."""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from queenpy.chaos.core import Context, Profile, Result
from queenpy.chaos.processes import ChaosError
from queenpy.chaos.scenarios import SCENARIOS
from queenpy.harness import PrivatePostgres

__all__ = ["Config", "run", "table"]


@dataclass(frozen=True)
class Config:
    """``quick``: the bounded profile; ``only``: comma-separated name patterns; ``out``: JSON results file
    (None: none); ``workdir``: parent of the run's directory (default: system temp); ``keep``: keep it (logs
    of every broker and of PostgreSQL)."""

    quick: bool = False
    only: str | None = None
    out: Path | None = None
    workdir: Path | None = None
    keep: bool = False


def selected(only: str | None) -> list[Any]:
    if not only:
        return list(SCENARIOS)
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    chosen = [s for s in SCENARIOS if any(fnmatch.fnmatch(s.name, p) for p in patterns)]
    if not chosen:
        raise ChaosError(f"no scenario matches {only!r}; scenarios: {', '.join(s.name for s in SCENARIOS)}")
    return chosen


def _recovery(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def table(results: list[dict[str, Any]]) -> str:
    """The results as a Markdown table, then each scenario's checks and notes."""
    lines = [
        (
            "| scenario | pushed and acknowledged | consumed | lost | duplicated | redelivered (allowed) "
            "| recovery | result |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['scenario']} | {r['acknowledged']:,} | {r['consumed']:,} | {r['lost']:,} | "
            f"{r['unexpected_duplicates']:,} | {r['redeliveries']:,} | {_recovery(r['recovery_s'])} | "
            f"{'pass' if r['passed'] else 'FAIL'} |"
        )
    lines.append("")
    for r in results:
        lines.append(f"{r['scenario']} ({r['seconds']} s):")
        if r["error"]:
            lines.append(f"  ERROR {r['error']}")
        lines += [f"  [{'ok' if c['ok'] else 'FAILED'}] {c['check']}" for c in r["checks"]]
        lines += [f"  note: {note}" for note in r["notes"]]
    return "\n".join(lines)


def run(config: Config, echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run the chosen scenarios; returns one dict per scenario (``Result.as_dict``), also written to
    ``config.out``. Raises :class:`ChaosError` when nothing can run (no PostgreSQL, unknown names)."""
    scenarios = selected(config.only)
    profile = Profile.of(config.quick)
    base = Path(tempfile.mkdtemp(prefix="queenpy-chaos-", dir=config.workdir))
    echo(
        f"queenpy chaos ({'quick' if config.quick else 'full'}): {len(scenarios)} scenario(s), work dir "
        f"{base}"
    )
    logging.getLogger("pgserver").setLevel(logging.CRITICAL)
    postgres = PrivatePostgres(base / "pgdata")
    results: list[dict[str, Any]] = []
    try:
        for scenario in scenarios:
            workdir = base / scenario.name
            workdir.mkdir()
            ctx = Context(postgres, workdir, profile, echo)
            result = Result(scenario.name)
            echo(f"- {scenario.name}: {scenario.fault}")
            started = time.monotonic()
            try:
                asyncio.run(scenario.run(ctx, result))
            except Exception as exc:  # noqa: BLE001 - one broken scenario does not hide the others
                result.error = f"{type(exc).__name__}: {exc}"
                echo(traceback.format_exc())
                if not postgres.running:
                    postgres.start()
            result.seconds = time.monotonic() - started
            results.append(result.as_dict())
            echo(
                f"  {'pass' if result.passed else 'FAIL'}: {result.acknowledged:,} acknowledged, "
                f"{result.lost} lost, {result.unexpected_duplicates} duplicated, "
                f"recovery {_recovery(result.recovery_s)} ({result.seconds:.0f} s)"
            )
    finally:
        postgres.stop()
        if not config.keep:
            shutil.rmtree(base, ignore_errors=True)
    if config.out is not None:
        config.out.write_text(json.dumps({"quick": config.quick, "results": results}, indent=2) + "\n")
    return results
