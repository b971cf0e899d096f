"""Runners per scenario kind, each a mixin of :class:`queenpy.bench.core.BenchCore` with a
``_run_<kind>(scenario, round_no)`` method; :class:`queenpy.bench.scenarios.Bench` combines them."""
