"""The driver of the orchestrator a fleet runs on, as the command's backend names it
(:meth:`kctl.backend.Backend.orchestrator`): Docker Swarm (:mod:`kctl.fleet.swarm`) on a
host, the simulated orchestrator (:mod:`kctl.fleet.simfleet`) under ``--simulate``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kctl.backend import Backend, Orchestrator
from kctl.fleet.simfleet import SimulatedFleet
from kctl.fleet.spec import FleetSpec
from kctl.fleet.swarm import SwarmDriver
from kctl.fleet.view import FleetDriver


def _swarm(fleet: FleetSpec, state_dir: Path) -> FleetDriver:
    return SwarmDriver(fleet.name, str(state_dir), fleet.swarm.manager, fleet.swarm, fleet.source)


def _simulated(fleet: FleetSpec, state_dir: Path) -> FleetDriver:
    return SimulatedFleet(fleet.name, state_dir)


_DRIVERS: dict[Orchestrator, Callable[[FleetSpec, Path], FleetDriver]] = {
    "swarm": _swarm,
    "simulated": _simulated,
}


def fleet_driver(backend: Backend, fleet: FleetSpec, state_dir: Path) -> FleetDriver:
    """The driver of ``fleet``'s orchestrator; ``state_dir`` is the fleet's own."""
    return _DRIVERS[backend.orchestrator()](fleet, state_dir)
