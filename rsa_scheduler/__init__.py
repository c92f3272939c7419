"""rsa-scheduler: the RAMDISK Storage Accelerator for SLURM (Wickberg & Carothers, ROSS'12).

Layers (imports only point downwards):
  core/    pure state machines, transition table, allocator, directive grammar
  store/   durable SQLite event log and projections
  config/  YAML configuration loaded into typed core policy objects
  sim/     scenario simulator driving the real core
  cli/     the ``rsa`` command
"""

__version__ = "0.1.0"
