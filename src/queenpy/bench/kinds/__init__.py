"""The kinds of scenario, one module each, registered here: a module exports ``run(context, scenario,
round_no)`` and ``summarize(measured)`` (and, where the kind has more to say, ``report_lines(entry)``) and
bundles them as ``KIND`` (:class:`queenpy.bench.core.Kind`). The runner looks a scenario's kind up in
:data:`KINDS` and knows none by name.

A new kind: a module here with its ``KIND``, one line in :data:`KINDS`, and its rows in
:mod:`queenpy.bench.catalog`.
"""

from __future__ import annotations

from queenpy.bench.core import Kind
from queenpy.bench.kinds import consume, keepup, operators, push, scale, soak, spark, streams

__all__ = ["KINDS"]

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        push.KIND,
        consume.KIND,
        keepup.KIND,
        soak.KIND,
        operators.KIND,
        streams.KIND,
        spark.KIND,
        scale.KIND,
    )
}
