"""rsad entry point. Owns process start-up and shutdown: arguments, logging, signals,
systemd notification, and wiring the daemon to its API servers."""

from __future__ import annotations

import gc
import logging
import signal
import sys
import threading
import time
from types import FrameType

import click

from rsa_scheduler import __version__
from rsa_scheduler.errors import InternalError, RsaError, user_line

log = logging.getLogger("rsad")


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rsad")
@click.option("--config", "config_path", envvar="RSA_CONFIG", type=click.Path(dir_okay=False),
              help="Configuration file (default /etc/rsa/rsa.yaml).")
@click.option("--check", "--check-config", "check", is_flag=True,
              help="Validate the configuration, open and migrate the store, replay the "
                   "event log, print a summary and exit.")
@click.option("--log-level", default=None, help="Override daemon.log_level.")
def rsad(config_path: str | None, check: bool, log_level: str | None) -> None:
    """rsad — the RSA scheduler daemon.

    Watches Slurm's queue, allocates RSA nodes to the job next to run, builds its RAMDISK,
    stages its #RSA_DATA_IN in before it starts and its #RSA_DATA_OUT out after it ends,
    and tears the RAMDISK down once the output is verified on persistent storage. Runs as
    root under systemd (rsad.service: Type=notify, a watchdog); its state lives in
    daemon.db_path and survives restarts (a restart fences what an earlier rsad left
    running on the RSA nodes before it re-issues anything). SIGTERM stops it cleanly.
    Operators talk to it with rsa(1); the Prolog, Epilog and PrologSlurmctld hooks
    through its API."""
    from rsa_scheduler.config import load_config
    from rsa_scheduler.daemon.api import ApiServers, Routes
    from rsa_scheduler.daemon.systemd import notify, watchdog_interval
    from rsa_scheduler.daemon.wiring import check_lockin, make_daemon

    cfg = load_config(config_path)
    _setup_logging(log_level or cfg.daemon.log_level.value)
    check_lockin(cfg)  # refuses a lock-in the running Slurm would ignore
    daemon = make_daemon(cfg)
    servers = None
    if not check:
        # the API answers from now on: until start() has replayed the log and fenced what
        # an earlier rsad left on the RSA nodes, burst_buffer.lua's hooks hear "not yet"
        # and everything else "rsad is starting; retry" (api.Routes, Daemon.ready)
        servers = ApiServers.from_config(Routes(daemon), cfg.daemon.api)
        servers.start()
    try:
        daemon.start()
    except BaseException:
        if servers is not None:
            servers.stop()
        raise
    # What start-up built (the modules, the state replayed) lives as long as rsad: out of
    # the collector's sight, a full collection no longer walks every record each time
    # (hundreds of thousands at a large centre; reference counting still frees what is
    # dropped). rsad's first cycle costs ~7% less CPU (bench/bench_first_cycle.py).
    gc.freeze()
    if check:
        click.echo(f"rsad: config {cfg.source}: ok; store {cfg.daemon.db_path}: "
                   f"{daemon.store.last_seq()} events, {len(daemon.sched.records)} jobs "
                   f"tracked, {len(daemon.sched.outstanding())} actions outstanding")
        daemon.shutdown()
        daemon.store.close()
        return

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    listen = cfg.daemon.api.listen
    assert servers is not None
    from rsa_scheduler.daemon.wiring import make_health, make_tender

    health = make_health(cfg, daemon)
    if health is not None:
        health.start(stop)
        log.info("RSA-node health checks every %gs", cfg.health.interval)
    tender = make_tender(cfg, daemon)
    if tender is not None:
        tender.start(stop)
        log.info("RAMDISK checks every %gs", cfg.health.ramdisk_interval)
    if cfg.metrics.listen is not None:
        from rsa_scheduler.daemon.metrics import Metrics

        daemon.metrics = Metrics()
        # the state recovered from the log, published before the loop runs (this thread is
        # the only one touching it yet); from now on the loop publishes once per cycle
        daemon.published.publish(daemon.status_view())
        daemon.metrics.watch(daemon.published, daemon.staging_workers)
        daemon.metrics.serve(cfg.metrics.listen.host, cfg.metrics.listen.port)
        log.info("metrics on http://%s:%d/metrics", cfg.metrics.listen.host,
                 cfg.metrics.listen.port)
    wd = watchdog_interval()
    log.info("rsad %s serving on %s%s; %d RSA nodes", __version__, cfg.daemon.api.socket,
             f" and {listen.host}:{listen.port}" if listen else "",
             len(daemon.sched.pool.nodes()))
    notify("READY=1")

    def on_cycle() -> None:
        notify(f"STATUS={len(daemon.sched.records)} jobs tracked, "
               f"{len(daemon.running)} actions running")

    last_beat = [0.0]

    def on_beat() -> None:
        # from the loop thread itself: a stuck loop stops pinging and systemd restarts
        # rsad; once a second (or every watchdog_interval, half of WatchdogSec, if that
        # is shorter), not every poll: a poll_interval longer than WatchdogSec must not
        # look like a hang
        now = time.monotonic()
        if wd is not None and now - last_beat[0] >= min(wd, 1.0):
            last_beat[0] = now
            notify("WATCHDOG=1")

    try:
        daemon.run(stop, on_cycle=on_cycle, on_beat=on_beat)
    finally:
        notify("STOPPING=1")
        servers.stop()
        daemon.shutdown()
        daemon.store.close()
        log.info("rsad stopped")


def main() -> None:
    try:
        rsad.main(standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except RsaError as e:
        if isinstance(e, InternalError):
            log.exception("rsad stopped on a bug")
        line = user_line(e, "rsad's log has it")
        click.echo(f"rsad: error: {line}", err=True)
        sys.exit(1)
