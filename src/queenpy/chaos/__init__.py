"""queenpy chaos: fault scenarios against real processes on loopback, each under load from producers and
acking consumers that record every message id, measured as lost / duplicated / recovery time.

Run it with ``queenpy chaos`` (``--quick`` for the bounded CI run); ``docs/reliability.md`` says what each
scenario proves and keeps the last measured figures. Modules: ``processes`` (the private PostgreSQL that
can be stopped, ``queenpy serve`` subprocesses that can be killed), ``load`` (producers, consumers, the
ledger of ids), ``core`` (profile, result, the load around one fault), ``scenarios`` (the faults),
``handoff`` (the consumer process killed mid-batch), ``runner`` (the run and its table).
"""

from queenpy.chaos.processes import ChaosError
from queenpy.chaos.runner import Config, run, table
from queenpy.chaos.scenarios import SCENARIOS

__all__ = ["SCENARIOS", "ChaosError", "Config", "run", "table"]
