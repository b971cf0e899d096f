"""The services of one broker process: a loop per job, started and stopped by the broker's lifespan.

Each loop tries to lead its job (:class:`~queenpy.services.leader.Leadership`) right away and then once per
interval, measured from the end of the previous attempt or run (as Queen does): the holder runs the job,
the others only try for the lock, so among every process on one database each job runs once per interval,
and a new holder takes over at most one interval after the old one died. A run skipped because an operator
paused the job (:func:`~queenpy.services.jobs.services_paused`) is not recorded; a run under way when it is
paused holds before its next step until it is resumed (:class:`~queenpy.services.jobs.Pace`).

Each run is logged (INFO: rows and duration; WARNING with the error) and recorded in ``queen.service_status``
and ``queen.service_runs`` (holder, start, end, rows, error, details): ``/health`` shows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson

from queenpy.services.jobs import Job, RunResult, jobs_for, services_paused
from queenpy.services.leader import Leadership
from queenpy.settings import ServiceSettings
from queenpy.store.database import Database

__all__ = ["Services"]

log = logging.getLogger("queenpy.services")


@dataclass
class LocalState:
    """What this process knows of one job: whether it holds it, and its own last run."""

    leader: bool = False
    runs: int = 0
    last_run_at: float | None = None
    last_duration_ms: float | None = None
    last_rows: int | None = None
    last_error: str | None = None


class Services:
    """The background jobs of one broker process.

    Args:
        database: the process's database (its pool records the runs and answers the status).
        settings: intervals, batch sizes, retention periods.
        holder: how this process is named in ``service_status.holder`` (host, port, worker, pid).

    The jobs' steps run on a pool of their own (one connection per job, opened when this process first leads
    a job), named ``queenpy-jobs`` in ``pg_stat_activity``: a job's work does not wait behind the requests
    for a connection, and PostgreSQL's CPU for the jobs can be told from the hot path's (the benchmarks
    label backends by ``application_name``).
    """

    def __init__(self, database: Database, settings: ServiceSettings, holder: str) -> None:
        self.database = database
        self.settings = settings
        self.holder = holder
        self.jobs: list[Job] = jobs_for(settings)
        self.leadership = Leadership(database.url)
        self.local: dict[str, LocalState] = {job.name: LocalState() for job in self.jobs}
        self._tasks: list[asyncio.Task[None]] = []
        self._job_database: Database | None = None
        self._job_database_lock = asyncio.Lock()

    async def job_database(self) -> Database:
        """The jobs' pool (``application_name`` queenpy-jobs), opened on first use. Raises
        :class:`queenpy.errors.DatabaseUnavailable` when PostgreSQL cannot be reached."""
        async with self._job_database_lock:
            if self._job_database is None:
                database = Database(
                    self.database.url,
                    pool_size=max(1, len(self.jobs)),
                    statement_timeout_ms=self.database.statement_timeout_ms,
                    application_name="queenpy-jobs",
                )
                await database.open()
                self._job_database = database
            return self._job_database

    async def start(self) -> None:
        """Start one loop per job (none when the services are off)."""
        self._tasks = [
            asyncio.get_running_loop().create_task(self._loop(job), name=f"queenpy-{job.name}")
            for job in self.jobs
        ]

    async def stop(self) -> None:
        """Stop the loops (a run in progress is cancelled between two of its steps' statements) and release
        the locks."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.leadership.close()
        database, self._job_database = self._job_database, None
        if database is not None:
            await database.close()

    async def _loop(self, job: Job) -> None:
        while True:
            try:
                state = self.local[job.name]
                leader = await self.leadership.lead(job.name, job.lock_key)
                if leader and not state.leader:
                    log.info("services: %s now runs here (%s)", job.name, self.holder)
                    await self.database.fetchval(
                        "SELECT queen.service_acquired_v1($1, $2)", job.name, self.holder
                    )
                state.leader = leader
                if leader and not await services_paused(self.database, job.name):
                    await self._run(job, state)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a job loop never dies; the next interval tries again
                log.warning("services: %s: %s", job.name, exc)
            await asyncio.sleep(job.interval_s)

    async def _run(self, job: Job, state: LocalState) -> None:
        started = datetime.datetime.now(datetime.UTC)
        clock = time.monotonic()
        error: str | None = None
        result = RunResult()
        try:
            result = await job.run(await self.job_database())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded, logged, retried next interval
            error = f"{exc.__class__.__name__}: {exc}"
        duration_ms = (time.monotonic() - clock) * 1000
        finished = started + datetime.timedelta(milliseconds=duration_ms)
        state.runs += 1
        state.last_run_at, state.last_duration_ms = time.time(), duration_ms
        state.last_rows, state.last_error = result.rows, error
        if error is not None:
            log.warning("services: %s failed after %.0f ms: %s", job.name, duration_ms, error)
        elif result.rows:
            log.log(
                logging.DEBUG if job.quiet else logging.INFO,
                "services: %s: %d rows in %.0f ms %s",
                job.name,
                result.rows,
                duration_ms,
                orjson.dumps(result.details).decode(),
            )
        else:
            log.debug("services: %s: nothing to do (%.0f ms)", job.name, duration_ms)
        await self.database.fetchval(
            "SELECT queen.service_record_v1($1, $2, $3, $4, $5, $6, $7::jsonb)",
            job.name,
            self.holder,
            started,
            finished,
            result.rows,
            error,
            orjson.dumps(result.details).decode(),
        )

    def local_status(self) -> dict[str, Any]:
        """This process's view: per job, whether it holds it and its own last run here."""
        return {
            name: {
                "leader": s.leader,
                "runsHere": s.runs,
                "lastRunHereMs": round(s.last_duration_ms, 3) if s.last_duration_ms is not None else None,
                "lastRowsHere": s.last_rows,
                "lastErrorHere": s.last_error,
            }
            for name, s in self.local.items()
        }

    async def status(self) -> dict[str, Any]:
        """Every job as recorded in the database (holder, last run, totals; see ``queen.services_status_v1``),
        with this process's own view merged in; the local view alone if the database cannot answer."""
        try:
            recorded: dict[str, Any] = orjson.loads(
                await self.database.fetchval("SELECT queen.services_status_v1()::text")
            )
        except Exception:  # noqa: BLE001 - /health must answer while PostgreSQL is down
            recorded = {}
        local = self.local_status()
        return {
            "enabled": bool(self.jobs),
            "holder": self.holder,
            "jobs": {
                name: {**recorded.get(name, {}), **local.get(name, {})}
                for name in sorted(set(recorded) | set(local))
            },
        }
