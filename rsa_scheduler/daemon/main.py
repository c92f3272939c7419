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
from typing import TYPE_CHECKING

import click

from rsa_scheduler import __version__
from rsa_scheduler.errors import InternalError, RsaError, user_line

if TYPE_CHECKING:
    from rsa_scheduler.config import Config

log = logging.getLogger("rsad")


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rsad")
@click.option("--config", "config_path", envvar="RSA_CONFIG", type=click.Path(dir_okay=False),
              help="Configuration file (default /etc/rsa/rsa.yaml).")
@click.option("--check", "--check-config", "check", is_flag=True,
              help="Validate the configuration, read the store without changing it "
                   "(pending migrations, events, jobs, outstanding actions), say whether "
                   "an rsad runs on it, in which slurm.mode (and whether a start in this "
                   "one is refused), whether an rsa admin drain is in force, and exit. "
                   "Touches nothing: no lock, no write, no fence, no dispatch, no SSH "
                   "(unless --nodes).")
@click.option("--nodes", "check_nodes", is_flag=True,
              help="With --check: also run each RSA node's read-only check over SSH "
                   "(what `rsa nodes check` reports).")
@click.option("--log-level", default=None, help="Override daemon.log_level.")
def rsad(config_path: str | None, check: bool, check_nodes: bool,
         log_level: str | None) -> None:
    """rsad — the RSA scheduler daemon.

    Watches Slurm's queue, allocates RSA nodes to the job next to run, builds its RAMDISK,
    stages its #RSA_DATA_IN in before it starts and its #RSA_DATA_OUT out after it ends,
    and tears the RAMDISK down once the output is verified on persistent storage. Runs as
    root under systemd (rsad.service: Type=notify, a watchdog); its state lives in
    daemon.state_dir (rsa.db) and survives restarts (a restart fences what an earlier
    rsad left running on the RSA nodes before it re-issues anything). One rsad per store: a second
    one exits at once. SIGTERM stops it cleanly. Operators talk to it with rsa(1); the
    Prolog, Epilog and PrologSlurmctld hooks through its API."""
    from rsa_scheduler.config import load_config
    from rsa_scheduler.daemon.wiring import check_lockin

    if check_nodes and not check:
        raise click.UsageError("--nodes goes with --check")
    cfg = load_config(config_path)
    _setup_logging(log_level or cfg.daemon.log_level.value)
    for warning in cfg.warnings:  # what `rsa config check` warns about, in rsad's log
        log.warning("%s", warning)
    check_lockin(cfg)  # refuses a lock-in the running Slurm would ignore (asks, changes nothing)
    if check:
        _check(cfg, check_nodes)
        return
    _serve(cfg)


def _check(cfg: Config, nodes: bool) -> None:
    """``rsad --check``: report and exit (daemon/check.py); exit 1 when a node lacks
    something (``--nodes``)."""
    from rsa_scheduler.core.limits import limit_lines
    from rsa_scheduler.daemon.check import check_nodes, inspect_store

    click.echo(f"rsad: config {cfg.source}: ok")
    for line in limit_lines(cfg.allocation):
        click.echo(f"rsad: {line}")
    for line in inspect_store(cfg).lines():
        click.echo(f"rsad: {line}")
    if nodes:
        ok, lines = check_nodes(cfg)
        for line in lines:
            click.echo(f"rsad: {line}")
        if not ok:
            raise SystemExit(1)


def _serve(cfg: Config) -> None:
    """Take the store's lock, start, serve until SIGTERM."""
    from rsa_scheduler.daemon.api import Routes
    from rsa_scheduler.daemon.apiserver import ApiServers
    from rsa_scheduler.daemon.systemd import notify, watchdog_interval
    from rsa_scheduler.daemon.wiring import make_daemon
    from rsa_scheduler.store.lock import StoreLock

    # before anything else (the store, the API socket, the RSA nodes' fence): a second
    # rsad on this store stops here, having touched nothing
    lock = StoreLock.acquire(cfg.daemon.db_path)
    daemon = make_daemon(cfg)
    # the API answers from now on: until start() has replayed the log and fenced what an
    # earlier rsad left on the RSA nodes, burst_buffer.lua's hooks hear "not yet" and
    # everything else "rsad is starting; retry" (api.Routes, Daemon.ready)
    servers = ApiServers.from_config(Routes(daemon), cfg.daemon.api)
    servers.start()
    try:
        daemon.start()
    except BaseException:
        servers.stop()
        raise
    # What start-up built (the modules, the state replayed) lives as long as rsad: out of
    # the collector's sight, a full collection no longer walks every record each time
    # (hundreds of thousands at a large centre; reference counting still frees what is
    # dropped). rsad's first cycle costs ~7% less CPU (bench/bench_first_cycle.py).
    gc.freeze()

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # SlurmUser (an operator of the API, its hooks among them) by uid, as Slurm names it
    from rsa_scheduler.daemon.operators import learn_in_background
    from rsa_scheduler.slurm.cli import CliSlurm

    learn_in_background(CliSlurm(bin_dir=cfg.slurm.bin_dir,
                                 timeout=cfg.slurm.command_timeout).show_config, stop)
    listen = cfg.daemon.api.listen
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
    def status() -> str:
        return (f"STATUS={len(daemon.sched.records)} jobs tracked, "
                f"{len(daemon.running)} actions running")

    # the status goes with READY=1: `systemctl start` returns on READY, and the first
    # cycle (which may wait on Slurm) must not leave the unit without one until it ends
    notify(f"READY=1\n{status()}")

    def on_cycle() -> None:
        notify(status())

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
        lock.release()


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
