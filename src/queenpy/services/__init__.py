"""The broker's background work: what runs apart from any request (on a timer, a notification or a scrape,
or after the request that started it was answered).

Run once across every broker process (DESIGN.md section 1, API.md section 16): retention, eviction, maxSize
recounts, partition cleanup, history trimming and statistics. Modules: :mod:`.leader` (who runs a job:
advisory locks), :mod:`.jobs` (what a run does), :mod:`.runner` (the loops); the SQL is in
``sql/procedures/080_services.sql`` (stats: ``081_stats.sql``), the tables in
``sql/migrations/009_services.sql``.

Run in each worker process: :mod:`.maintenance` (this process's copy of the maintenance switches),
:mod:`.metrics` (the sampler of the process's numbers and their per-minute rows), :mod:`.prometheus` (the
instruments and what a scrape does), :mod:`.spark_apply` (pipelined Spark sink commits applied after their
answer), :mod:`.schema_copy` (the ``queen`` schema copied to another database, ``/api/v1/migration/*``).

Layering: ``server`` composes and starts them (``server/worker.py``), its routes call them; they use
``engine`` and ``store``, never ``server``. Each takes what it reads as constructor arguments.
"""

from __future__ import annotations

from queenpy.services.jobs import EvictionJob, Job, RetentionJob, RunResult, StatsJob, jobs_for
from queenpy.services.leader import Leadership
from queenpy.services.runner import Services

__all__ = [
    "EvictionJob",
    "Job",
    "Leadership",
    "RetentionJob",
    "RunResult",
    "Services",
    "StatsJob",
    "jobs_for",
]
