"""The kinds of scenario, one module each, found here: a module exports ``run(context, scenario, round_no)``
and ``summarize(measured)`` (and, where the kind has more to say, ``report_lines(entry)``) and bundles them as
``KIND`` (:class:`queenpy.bench.core.Kind`). The runner looks a scenario's kind up in :data:`KINDS` and knows
none by name.

A new kind: a module here with its ``KIND`` (every public module of this package is imported and must have
one; modules whose names start with ``_`` are helpers), and its rows in :mod:`queenpy.bench.catalog`.
"""

from __future__ import annotations

import importlib
import pkgutil

from queenpy.bench.core import Kind

__all__ = ["KINDS"]


def _discover() -> dict[str, Kind]:
    """Every public module of this package's ``KIND``, by its name. Raises TypeError for a module without one,
    ValueError for two kinds of one name."""
    kinds: dict[str, Kind] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda module: module.name):
        if info.name.startswith("_"):
            continue
        kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
        if not isinstance(kind, Kind):
            raise TypeError(f"{__name__}.{info.name} has no KIND (a queenpy.bench.core.Kind)")
        if kind.name in kinds:
            raise ValueError(f"two bench kinds named {kind.name!r}")
        kinds[kind.name] = kind
    return kinds


KINDS: dict[str, Kind] = _discover()
