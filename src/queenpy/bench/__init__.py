"""queenbench: the queenpy benchmark suite (Queen's standard scenarios next to PostgreSQL's own limit).

Run it with ``queenpy bench`` (or ``python -m queenpy bench``); ``benchmarks/RESULTS.md`` explains the
output. Modules: ``runner`` (rounds, medians, outputs), ``scenarios`` (what each scenario does and how it is
checked against PostgreSQL), ``wrk`` + ``lua/`` (the load), ``postgres`` (private server, pgbench),
``broker`` (``queenpy serve`` under test), ``procfs`` (CPU and memory from /proc), ``report`` (table, chart),
``parsing`` (pure text parsing, unit-tested).
"""

from queenpy.bench.parsing import parse_env_assignments
from queenpy.bench.runner import BenchError, Config, run, scenario_names
from queenpy.bench.scenarios import LIMITS, SCENARIOS

__all__ = ["LIMITS", "SCENARIOS", "BenchError", "Config", "parse_env_assignments", "run", "scenario_names"]
