"""queenbench: the queenpy benchmark suite (Queen's standard scenarios next to PostgreSQL's own limit).

Run it with ``queenpy bench`` (or ``python -m queenpy bench``); ``benchmarks/RESULTS.md`` explains the
output. Modules: ``catalog`` (the scenarios and the limits), ``kinds`` (one module per kind of scenario, and
their registry), ``core`` (the context a kind runs with: the measuring core, ground truth from PostgreSQL),
``load`` (how kinds drive wrk), ``runner`` (rounds, medians, outputs), ``wrk`` + ``lua/`` (the load),
``postgres`` (private server, pgbench), ``broker`` (``queenpy serve`` under test), ``procfs`` (CPU and memory
from /proc), ``report`` (table, charts), ``summary`` (the results page and the history), ``parsing`` (pure
text parsing, unit-tested).
"""

from queenpy.bench.catalog import LIMITS, SCENARIOS
from queenpy.bench.parsing import parse_env_assignments
from queenpy.bench.runner import BenchError, Config, kind_lines, run, scenario_names, write_summary

__all__ = [
    "LIMITS",
    "SCENARIOS",
    "BenchError",
    "Config",
    "kind_lines",
    "parse_env_assignments",
    "run",
    "scenario_names",
    "write_summary",
]
