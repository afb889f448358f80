"""An SGLang-compatible server simulator: ``python -m kctl.sim <sglang.launch_server args>``.

A real HTTP server (standard library only) that starts, warms up, serves ``/generate``
with calibrated timings and deterministic greedy outputs, and fails on demand
(``KCTL_SIM_FAULT``), so kctl's whole deploy loop runs without GPUs. See
``docs/simulator.md``.

This package imports nothing from kctl outside ``kctl.sim``: it is copied into test
images, where ``kctl/sim/shim`` provides an ``sglang`` package whose
``python3 -m sglang.launch_server`` runs it.

Modules: ``args`` (launch flags), ``settings`` (env), ``calibration`` (speed table),
``kernel`` (verify path + activation line), ``tokens`` (deterministic outputs),
``request`` (/generate bodies as data), ``plan`` (request timing as data),
``engine`` (server state, running requests), ``server`` (HTTP),
``lifecycle`` (start-up, signals), ``logs``.
"""
