"""Benchmarks of opclass, run from the repository root: ``python -m benchmarks`` measures the
per-call overhead of op classes against the other ways to define an op, per guard, with optional
scaling, definition-cost and compile-time tables (:mod:`benchmarks.benchmark`), and
``python -m benchmarks.compile_bench`` prints how long ``torch.compile`` takes to trace chained op
calls, per way of calling the op (:mod:`benchmarks.compile_bench`).
"""
