"""The store layer: PostgreSQL connections, migrations and the embedded server."""

from __future__ import annotations

from queenpy.store.database import Database
from queenpy.store.migrate import apply_migrations, render_sql

__all__ = ["Database", "apply_migrations", "render_sql"]
