"""The HTTP shell of the broker: validation, routes, worker processes."""

from __future__ import annotations

from queenpy.server.app import create_app

__all__ = ["create_app"]
