"""Simulators that drive the real core and allocator: scripted scenarios and trace replay.

Re-exports only; see :mod:`rsa_scheduler.sim.scenario` (the YAML format, loaded into
:mod:`rsa_scheduler.sim.model`), :mod:`rsa_scheduler.sim.engine` (the discrete-event
engine), :mod:`rsa_scheduler.sim.result` (timelines and the JSON document), and for trace
replay :mod:`rsa_scheduler.sim.swf` (the SWF reader), :mod:`rsa_scheduler.sim.iomodel`
(volumes, bandwidths, the shared PFS), :mod:`rsa_scheduler.sim.replay` (the engine, with
:mod:`rsa_scheduler.sim.tracejob`, its per-job state, and :mod:`rsa_scheduler.sim.logcheck`,
its replay-equals-live check) and :mod:`rsa_scheduler.sim.comparison` (the run with the RSA
against the baseline; its ``replay`` function is not re-exported).
"""

from rsa_scheduler.sim.cluster import ReplayConfig
from rsa_scheduler.sim.engine import SimulationBroken, simulate
from rsa_scheduler.sim.model import Scenario
from rsa_scheduler.sim.result import JobResult, Row, SimResult
from rsa_scheduler.sim.scenario import load_scenario, parse_scenario
from rsa_scheduler.sim.swf import TraceError, read_swf

__all__ = [
    "JobResult",
    "ReplayConfig",
    "Row",
    "Scenario",
    "SimResult",
    "SimulationBroken",
    "TraceError",
    "load_scenario",
    "parse_scenario",
    "read_swf",
    "simulate",
]
