"""Run the benchmark suite without the ``bench`` command wired into ``queenpy``:

    python benchmarks/run.py --quick            # same options as ``queenpy bench``
"""

from __future__ import annotations

import typer

from queenpy.bench_cli import register

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
register(app)

if __name__ == "__main__":
    app()
