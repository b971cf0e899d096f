"""The benchmark: the catalogue (:mod:`.catalog`) and one runner per scenario kind (:mod:`.kinds`) over the
shared measuring core (:mod:`.core`). A scenario of kind ``k`` runs ``Bench._run_k``."""

from __future__ import annotations

from typing import Any

from queenpy.bench.catalog import LIMITS, SCENARIOS, Limit, Options, Scenario, payload
from queenpy.bench.core import environment_facts
from queenpy.bench.kinds.consume import ConsumeRuns
from queenpy.bench.kinds.keepup import KeepupRuns
from queenpy.bench.kinds.operators import OperatorsRuns
from queenpy.bench.kinds.push import PushRuns
from queenpy.bench.kinds.soak import SoakRuns
from queenpy.bench.kinds.spark import SparkRuns
from queenpy.bench.kinds.streams import StreamsRuns

__all__ = ["LIMITS", "SCENARIOS", "Bench", "Limit", "Options", "Scenario", "environment_facts", "payload"]


class Bench(PushRuns, StreamsRuns, ConsumeRuns, KeepupRuns, SoakRuns, OperatorsRuns, SparkRuns):
    """The whole suite's runner: a private PostgreSQL, the broker, and a runner per scenario kind."""

    def run_scenario(self, scenario: Scenario, round_no: int) -> dict[str, Any]:
        run: dict[str, Any] = getattr(self, f"_run_{scenario.kind}")(scenario, round_no)
        run["valid"] = not run["problems"]
        self.scenario_results[(round_no, scenario.name)] = run
        return run
