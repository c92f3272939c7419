"""Scenario simulator: drive the real core and allocator with a scripted scenario.

Re-exports only; see :mod:`rsa_scheduler.sim.scenario` (the YAML format, loaded into
:mod:`rsa_scheduler.sim.model`), :mod:`rsa_scheduler.sim.engine` (the discrete-event
engine) and :mod:`rsa_scheduler.sim.result` (timelines and the JSON document).
"""

from rsa_scheduler.sim.engine import SimulationBroken, simulate
from rsa_scheduler.sim.model import Scenario
from rsa_scheduler.sim.result import JobResult, Row, SimResult
from rsa_scheduler.sim.scenario import load_scenario, parse_scenario

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
