"""Background services of the broker (DESIGN.md section 1, API.md section 16): retention, eviction, maxSize
recounts, partition cleanup, history trimming and statistics, run once across every broker process.

Layering: ``server`` starts them (``Broker.start``), they use ``store``; the SQL is in
``sql/procedures/080_services.sql`` (stats: ``081_stats.sql``), the tables in ``sql/migrations/009_services.sql``.
Modules: :mod:`.leader` (who runs a job: advisory locks), :mod:`.jobs` (what a run does), :mod:`.runner` (the
loops).
"""

from __future__ import annotations

from queenpy.services.jobs import EvictionJob, Job, RetentionJob, RunResult, StatsJob, jobs_for
from queenpy.services.leader import Leadership
from queenpy.services.runner import Services

__all__ = ["EvictionJob", "Job", "Leadership", "RetentionJob", "RunResult", "Services", "StatsJob", "jobs_for"]
