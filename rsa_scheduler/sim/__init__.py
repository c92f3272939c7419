"""Scenario simulator: drive the real core and allocator with a scripted scenario.

Re-exports only; see :mod:`rsa_scheduler.sim.scenario` (the YAML format) and
:mod:`rsa_scheduler.sim.engine` (the discrete-event engine).
"""

from rsa_scheduler.sim.engine import JobResult, Row, SimResult, SimulationBroken, simulate
from rsa_scheduler.sim.scenario import Scenario, load_scenario, parse_scenario

__all__ = [
    "JobResult",
    "Row",
    "Scenario",
    "SimResult",
    "SimulationBroken",
    "load_scenario",
    "parse_scenario",
    "simulate",
]
