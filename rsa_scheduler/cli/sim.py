"""``rsa sim``: run a scenario or replay a workload trace through the real core.

Owns the command lines (``rsa sim [run] SCENARIO``, ``rsa sim replay --swf TRACE`` or
``--sacct FILE``, ``rsa sim plan ... --target ...``, their ``--plot FILE.svg``), exit
codes and the human-readable rendering of a run; loading and running scenarios and
traces, and the plan's sweep and plots, is :mod:`rsa_scheduler.sim`.

Exit codes: 0 every expectation met (a replay that ran); 1 an expectation failed (one
``FAILED`` line each on stderr); 65 (EX_DATAERR) the scenario or trace file is invalid
(``FILE:LINE: message``); 70 (EX_SOFTWARE) an invariant broke or the core raised — a bug,
described on one line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import click

from rsa_scheduler.core.policy import (
    NODE_TIERS,
    AllocationPolicy,
    EarlyStart,
    ResetTrigger,
    StageOut,
    StagingPolicy,
    Tier,
    node_tier,
)
from rsa_scheduler.core.units import format_duration, parse_duration, parse_size
from rsa_scheduler.errors import ScenarioError
from rsa_scheduler.sim import SimResult, SimulationBroken, load_scenario, simulate
from rsa_scheduler.sim.cluster import ORDERINGS, ReplayConfig, TierSpec
from rsa_scheduler.sim.comparison import replay as run_replay
from rsa_scheduler.sim.iomodel import IoParams
from rsa_scheduler.sim.plan import mixes, parse_target, recommend, sweep
from rsa_scheduler.sim.replay import Replay
from rsa_scheduler.sim.report import summary
from rsa_scheduler.sim.svg import CHARTS, plan_chart, plan_charts, replay_chart
from rsa_scheduler.sim.timeline import Timeline
from rsa_scheduler.sim.workload import Workload, load_workload

EX_FAILED = 1
EX_DATAERR = 65
EX_SOFTWARE = 70


class _SimGroup(click.Group):
    """``rsa sim SCENARIO`` is ``rsa sim run SCENARIO``: a first argument that names no
    sub-command (and is not --help) selects ``run``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_SimGroup)
def sim() -> None:
    """Simulate the RSA with the real scheduler core: a scenario, or a workload trace.

    \b
    rsa sim SCENARIO.yaml [--json]        a scripted scenario (same as rsa sim run)
    rsa sim replay --swf TRACE.swf --json  a Standard Workload Format trace
    rsa sim replay --sacct sacct.txt       a centre's own history (sacct -P output)
    rsa sim plan --swf TRACE.swf --target mean_io_s=5m   which RSA to provision
    """


@sim.command("run")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the run as one JSON document.")
def run(scenario: str, as_json: bool) -> None:
    """Simulate SCENARIO (a YAML file) with the real scheduler core.

    Prints each job's job-state and rsa-state timeline and the final RSA node pool, then
    checks the scenario's expect: block. Simulated time only: runs in milliseconds.
    """
    # sys.exit, not ctx.exit: rsa's main() runs click with standalone_mode=False.
    try:
        result = simulate(load_scenario(scenario))
    except ScenarioError as e:
        click.echo(f"rsa sim: {e}", err=True)
        sys.exit(EX_DATAERR)
    except SimulationBroken as e:
        click.echo(f"rsa sim: invariant violated: {e}", err=True)
        sys.exit(EX_SOFTWARE)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        click.echo(render(result))
    for failure in result.failures:
        click.echo(f"rsa sim: {scenario}: FAILED: {failure}", err=True)
    if not result.passed:
        sys.exit(EX_FAILED)


def render(result: SimResult) -> str:
    """The run as text: a timeline table per job, notes, the final pool, the verdict."""
    sc = result.scenario
    verdict = "PASS" if result.passed else "FAIL"
    out = [f"scenario {sc.name!r} ({sc.source}): {verdict} — "
           f"{format_duration(result.end)} simulated, {result.steps} steps"]
    if sc.known_bug:
        out.append(f"known core bug (expected to fail until fixed): {sc.known_bug}")
    for jid, job in result.jobs.items():
        spec = sc.jobs[jid]
        out.append("")
        head = (f"job {jid} (user {spec.user}, {spec.compute_nodes} compute node"
                f"{'' if spec.compute_nodes == 1 else 's'}, priority {spec.priority})")
        if not job.tracked:
            out.append(f"{head}: no #RSA_ directives, not tracked")
            continue
        out.append(head)
        rows: list[tuple[str, ...]] = [("TIME", "JOB-STATE", "RSA-STATE", "TRIGGER",
                                        "ACTIONS")]
        for r in job.rows:
            trigger = r.trigger + (f" [{r.detail}]" if r.detail else "")
            rows.append((format_duration(r.t), r.job_state, r.rsa_state, trigger,
                         ", ".join(_action_text(a) for a in r.actions)))
        out += _table(rows, indent="  ")
        fin = job.final
        out.append(f"  final: {fin['job_state']} / {fin['rsa_state']}, cycle {fin['cycle']}"
                   + (f", holds {fin['nodes']}" if fin["nodes"] else "")
                   + (", declined" if fin["declined"] else ""))
    if result.notes:
        out += ["", "notes:"]
        for note in result.notes:
            rest = ", ".join(f"{k} {_short(v)}" for k, v in note.items()
                             if k not in ("t", "event"))
            out.append(f"  {format_duration(note['t'])}  {note['event']}: {rest}")
    pool = result.pool
    held = ", ".join(f"{j}: {n}" for j, n in pool["held"].items()) or "-"
    out += ["", f"pool: free {pool['free'] or '-'}; held {held}; "
                f"drained {pool['drained'] or '-'}; down {pool['down'] or '-'}"]
    if result.failures:
        out.append(f"expectations: {len(result.failures)} of {result.checked} failed")
        out += [f"  FAILED: {f}" for f in result.failures]
    else:
        out.append(f"expectations: {result.checked} checked, all met")
    return "\n".join(out)


def _action_text(action: dict[str, Any]) -> str:
    kind = str(action["kind"])
    for key in ("nodes", "mode", "target"):
        if action.get(key):
            return f"{kind} {action[key]}"
    return kind


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "[" + " ".join(str(v) for v in value) + "]"
    return str(value)


def _table(rows: list[tuple[str, ...]], indent: str) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [(indent + "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False))
            + "  " + r[-1]).rstrip() for r in rows]


# ---- rsa sim replay ----------------------------------------------------------------------

DEFAULT_CAPACITY = "128G"  # seed 004 §4: the full-scale design's RSA nodes, 128 GB DRAM each
DEFAULT_TIER_BW = {Tier.RAM: "5G", Tier.SSD: "1536M"}


def parse_tiers(text: str) -> tuple[TierSpec, ...]:
    """``TIER:COUNT[:CAPACITY[:BANDWIDTH]]``, comma separated (sizes as Slurm writes them,
    bandwidth per node per second). Raises click.BadParameter."""
    out: list[TierSpec] = []
    seen: set[Tier] = set()
    for part in text.split(","):
        bits = part.strip().split(":")
        try:
            if not 2 <= len(bits) <= 4:
                raise ValueError("expected TIER:COUNT[:CAPACITY[:BANDWIDTH]]")
            tier = node_tier(bits[0])
            count = int(bits[1])
            if count < 0:
                raise ValueError("COUNT must be >= 0")
            capacity = parse_size(bits[2] if len(bits) > 2 else DEFAULT_CAPACITY)
            bw = parse_size(bits[3] if len(bits) > 3 else DEFAULT_TIER_BW[tier])
            if capacity < 1 or bw < 1:
                raise ValueError("CAPACITY and BANDWIDTH must be > 0")
        except ValueError as e:
            raise click.BadParameter(f"{part.strip()!r}: {e}", param_hint="--tiers") from e
        if tier in seen:
            raise click.BadParameter(f"tier {tier} given twice", param_hint="--tiers")
        seen.add(tier)
        if count:
            out.append(TierSpec(tier, count, capacity, float(bw)))
    if not out:
        raise click.BadParameter("no RSA nodes: give a COUNT > 0", param_hint="--tiers")
    return tuple(out)


def parse_prices(text: str) -> dict[str, float]:
    """``compute=1,ram=4,ssd=1``: price per node-hour."""
    prices = {"compute": 1.0, "ram": 4.0, "ssd": 1.0}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        try:
            if not sep or key not in prices:
                raise ValueError("expected compute=P, ram=P or ssd=P")
            price = float(value)
            if not price >= 0:
                raise ValueError("a price is >= 0")
        except ValueError as e:
            raise click.BadParameter(f"{part!r}: {e}", param_hint="--prices") from e
        prices[key] = price
    return prices


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        n = parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    if n < 1:
        raise click.BadParameter("must be > 0")
    return float(n)


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    if seconds <= 0:
        raise click.BadParameter("must be > 0")
    return seconds


#: the model options replay and plan share (docs/simulator.md)
MODEL_OPTIONS = [
    click.option("--io-time", default="5m", show_default=True, callback=_duration,
                 help="Tier auto: a job's #RSA_CAPACITY must be movable within this (its "
                 "bandwidth need, seed 000's checkpoint time target)."),
    click.option("--mix/--no-mix", default=True, show_default=True,
                 help="Tier auto may give a job nodes of both tiers when neither alone has "
                 "them free (allocation.mix; paced by the slower tier)."),
    click.option("--ordering", type=click.Choice(ORDERINGS), default="fifo",
                 show_default=True,
                 help="Stage-out ordering on the PFS: all at once (fifo); at most --alpha at a "
                 "time, smallest first (sjf) or priority then smallest (trio)."),
    click.option("--alpha", type=click.IntRange(min=1), default=2, show_default=True,
                 help="Concurrent stage-outs under sjf/trio (seed 003's α)."),
    click.option("--procs", type=click.IntRange(min=1),
                 help="Processors of the compute cluster (default: the trace's MaxProcs, "
                 "else inferred from the jobs and said so)."),
    click.option("--procs-per-node", type=click.IntRange(min=1),
                 help="Default: MaxProcs / MaxNodes of the trace header, else 1; with "
                 "--sacct the most CPUs per node a job held."),
    click.option("--ratio", type=click.IntRange(min=1), default=32, show_default=True,
                 help="Compute nodes per RSA node (seed 004 §3.1 proportional allocation)."),
    click.option("--max-nodes", type=click.IntRange(min=1), default=8, show_default=True,
                 help="Most RSA nodes one job gets from the proportional share."),
    click.option("--pfs-bw", callback=_size, default="20G", show_default=True,
                 help="The PFS's aggregate bandwidth per second, shared by all transfers."),
    click.option("--client-bw", callback=_size, default="1G", show_default=True,
                 help="One compute node's bandwidth per second to any storage."),
    click.option("--io-per-proc", callback=_size, default="1G", show_default=True,
                 help="Median input per processor of the synthetic volume model."),
    click.option("--fpp", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
                 help="Share of jobs writing one file per process (synthetic model)."),
    click.option("--stage-out", type=click.Choice([m.value for m in StageOut]),
                 help="Every job's stage-out method (tar aggregates many files into "
                 "one)."),
    click.option("--prices", default="",
                 help="Per node-hour: compute=1,ram=4,ssd=1 (default); ram and ssd "
                 "are also tier auto's prices."),
    click.option("--seed", type=int, default=1, show_default=True,
                 help="Seed of the synthetic volume model."),
    click.option("--early-start", type=click.Choice([e.value for e in EarlyStart
                                                     if e is not EarlyStart.UNION]),
                 default="fallback", show_default=True,
                 help="A job that starts before its stage-in is done reads the PFS "
                 "(fallback, seed 004 §3.1) or its Prolog holds it until staged (wait)."),
    click.option("--on-deck", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Queued jobs Slurm shows pending on Resources (FIFO: the first one)."),
    click.option("--check-stride", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Replay-check every Nth window of 20000 logged events (1: all)."),
    click.option("--pfs-create", type=click.FloatRange(min=0.0), default=83.27 / 2048,
                 show_default=True, help="Seconds to create one file when a job's processes "
                 "create theirs in one PFS directory (seed 004 Table 3: 83.27 s / 2048)."),
    click.option("--rsa-create", type=click.FloatRange(min=0.0), default=0.43 / 2048,
                 show_default=True, help="Seconds to create one file on a RAMDISK (seed 004 "
                 "Table 3: 0.43 s / 2048)."),
]


def model_options(f: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(MODEL_OPTIONS):
        f = option(f)
    return f


def build_config(work: Workload, specs: tuple[TierSpec, ...], *, ordering: str,
                 alpha: int, ratio: int, max_nodes: int, pfs_bw: float, client_bw: float,
                 io_per_proc: float, fpp: float, stage_out: str | None, prices: str,
                 seed: int, early_start: str, on_deck: int, check_stride: int,
                 pfs_create: float, rsa_create: float, io_time: float, mix: bool = True,
                 limit: int | None = None) -> ReplayConfig:
    """The replay's site from the command line and the workload's cluster. The allocator's
    cost model is the same prices (per node-hour) and per-node bandwidths."""
    io = IoParams(pfs_bw=pfs_bw, client_bw=client_bw,
                  tier_bw={t.tier: t.bw for t in specs}, seed=seed,
                  io_per_proc=io_per_proc, fpp_fraction=fpp,
                  pfs_create_shared_s=pfs_create, rsa_create_s=rsa_create)
    price = parse_prices(prices)
    policy = AllocationPolicy(
        ratio=ratio, max_nodes=max_nodes, max_request=max(16, max_nodes),
        default_tier=specs[0].tier if len(specs) == 1 else Tier.AUTO,
        price={t: price[t.value] for t in NODE_TIERS},
        bandwidth={t.tier: max(int(t.bw), 1) for t in specs}, io_time=io_time, mix=mix)
    return ReplayConfig(
        procs=work.procs, procs_per_node=work.procs_per_node, tiers=specs,
        allocation=policy,
        staging=StagingPolicy(reset_trigger=ResetTrigger.INPUT_DONE,
                              early_start=EarlyStart(early_start)),
        io=io, stage_out=StageOut(stage_out) if stage_out else None,
        ordering=ordering, alpha=alpha, prices=price, on_deck=on_deck,
        check_stride=check_stride, limit=limit)


def workload_options(f: Callable[..., None]) -> Callable[..., None]:
    """--swf and --sacct: the workload, one of the two."""
    f = click.option("--sacct", type=click.Path(dir_okay=False, allow_dash=True),
                     help="A centre's own history: the output of the sacct command "
                     "docs/simulator.md gives (- reads standard input).")(f)
    return click.option("--swf", "trace", type=click.Path(dir_okay=False),
                        help="Standard Workload Format trace (Parallel Workloads "
                        "Archive).")(f)


def load(trace: str | None, sacct: str | None, model: dict[str, Any]) -> Workload:
    """The workload of --swf or --sacct (the cluster from --procs, --procs-per-node or
    inferred); pops those two from ``model``. Raises TraceError."""
    if (trace is None) == (sacct is None):
        raise click.UsageError("give the workload: --swf TRACE or --sacct FILE (one)")
    return load_workload(swf=trace, sacct=sacct, procs=model.pop("procs"),
                         procs_per_node=model.pop("procs_per_node"))


@sim.command("replay")
@workload_options
@click.option("--rsa-nodes", type=click.IntRange(min=1), envvar="RSA_SIM_RSA_NODES",
              help="RAM RSA nodes (default 16); the same as --tiers ram:N.")
@click.option("--tiers", help="RSA nodes per tier: TIER:COUNT[:CAPACITY[:BANDWIDTH]],... "
              "e.g. ram:16:128G:5G,ssd:16:2T:1536M (bandwidth per node per second).")
@model_options
@click.option("--per-job", type=click.File("w"),
              help="Write one JSON line per job and run (rsa, baseline) to this file.")
@click.option("--plot", type=click.Path(dir_okay=False),
              help="Write wait, hold and I/O time over time, with and without the RSA, "
              "to this .svg file.")
@click.option("--limit", type=click.IntRange(min=1), help="Replay only the first N jobs.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def replay(trace: str | None, sacct: str | None, rsa_nodes: int | None, tiers: str | None,
           per_job: TextIO | None, plot: str | None, limit: int | None, as_json: bool,
           **model: Any) -> None:
    """Replay a workload (an SWF trace, or a centre's own sacct output) with the RSA, then
    without it (the baseline), and compare.

    Jobs run first-come-first-served on --procs processors; each reads its input, computes
    for its trace run time and writes its output, from and to its RSA nodes when the RSA
    staged it in time, else the PFS. The RSA run drives the daemon's own core and
    allocator. Prints jobs, mean wait, hold (time on the compute nodes) and I/O time, and
    cost, for both runs. The model and its defaults: docs/simulator.md.
    """
    if rsa_nodes is not None and tiers is not None:
        raise click.UsageError("give --rsa-nodes or --tiers, not both")
    specs = parse_tiers(tiers if tiers else f"ram:{rsa_nodes or 16}")
    check_plot(plot)
    try:
        work = load(trace, sacct, model)
        tell(work, "replay")
        cfg = build_config(work, specs, limit=limit, **model)
        timeline = Timeline()

        def write_job(run: str, detail: Mapping[str, Any]) -> None:
            timeline.add(run, detail)
            if per_job is not None:
                per_job.write(json.dumps({"run": run, **detail}) + "\n")

        # the per-job observer only when something uses it (it costs a dict per job)
        result = run_replay(work.jobs, cfg, source=work.source,
                            per_job=write_job if per_job or plot else None)
    except ScenarioError as e:
        _errors("rsa sim replay", e)
        sys.exit(EX_DATAERR)
    except SimulationBroken as e:
        click.echo(f"rsa sim replay: invariant violated: {e}", err=True)
        sys.exit(EX_SOFTWARE)
    result = {"trace": work.source, "workload": work.to_json(), "notes": work.notes,
              **result}
    if plot:
        write_plot(plot, replay_chart(timeline))
        result["plot"] = plot
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=False))
    else:
        click.echo(render_replay(result))


@sim.command("plan")
@workload_options
@click.option("--target", "target_text", required=True,
              help="What a configuration must meet: mean_wait_s, mean_hold_s or mean_io_s "
              "at most a duration (mean_io_s=5m), or io_throughput at least a size per "
              "second (io_throughput=2G).")
@click.option("--nodes", "counts", default="4,8,16,32", show_default=True,
              help="RSA node counts to try, comma separated.")
@click.option("--ram-shares", default="0,0.25,0.5,0.75,1", show_default=True,
              help="Shares of DRAM nodes to try (the rest SSD), comma separated, 0..1.")
@click.option("--ram", "ram_node", default="128G:5G", show_default=True,
              help="One DRAM node: CAPACITY:BANDWIDTH (per second).")
@click.option("--ssd", "ssd_node", default="2T:1536M", show_default=True,
              help="One SSD node: CAPACITY:BANDWIDTH (per second).")
@model_options
@click.option("--plots", type=click.Path(file_okay=False),
              help="Write wait.svg, hold.svg, utilisation.svg and cost.svg here.")
@click.option("--plot", type=click.Path(dir_okay=False),
              help="Write cost against I/O throughput, the recommendation marked, to this "
              ".svg file.")
@click.option("--limit", type=click.IntRange(min=1), help="Replay only the first N jobs.")
def plan(trace: str | None, sacct: str | None, target_text: str, counts: str,
         ram_shares: str, ram_node: str, ssd_node: str, plots: str | None,
         plot: str | None, limit: int | None, **model: Any) -> None:
    """Sweep RSA node count and DRAM:SSD mix over a workload (--swf or --sacct);
    recommend the cheapest that meets --target (seed 000's least-cost provisioning).

    Each configuration is one replay with the RSA (jobs ask #RSA_TIER=auto: the allocator
    picks each job's tier by --prices); its cost is every RSA node times its tier's price
    per node-hour. Prints one JSON object: the baseline without the RSA, every point, the
    recommendation, the cheapest DRAM-only configuration meeting the target, the cost
    saving over it and the I/O throughput gained at its cost (docs/simulator.md).
    """
    try:
        target = parse_target(target_text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--target") from e
    configs = mixes(_ints(counts, "--nodes"), _shares(ram_shares))
    per_tier = {t.tier: t for t in (_node_spec(Tier.RAM, ram_node, "--ram"),
                                    _node_spec(Tier.SSD, ssd_node, "--ssd"))}
    check_plot(plot)
    try:
        work = load(trace, sacct, model)
        tell(work, "plan")
        cfg = build_config(work, tuple(per_tier.values()), limit=limit, **model)
        base_run = Replay(work.jobs(), cfg, rsa=False, source=work.source)
        baseline = summary(base_run.run(), cfg, rsa=False, nodes=0)
        points = sweep(work.jobs, cfg, configs, per_tier, target, source=work.source)
    except ScenarioError as e:
        _errors("rsa sim plan", e)
        sys.exit(EX_DATAERR)
    except SimulationBroken as e:
        click.echo(f"rsa sim plan: invariant violated: {e}", err=True)
        sys.exit(EX_SOFTWARE)
    out: dict[str, Any] = {"trace": work.source, "workload": work.to_json(),
                           "notes": work.notes, **recommend(points, target)}
    out["baseline"] = {k: baseline[k] for k in ("jobs", "mean_wait_s", "mean_hold_s",
                                                "mean_io_s", "io_throughput")}
    out["points"] = points
    if plots:
        try:
            Path(plots).mkdir(parents=True, exist_ok=True)
            for name, text in plan_charts(points).items():
                (Path(plots) / name).write_text(text, encoding="utf-8")
        except OSError as e:
            raise click.ClickException(f"can't write the plots to {plots}: "
                                       f"{e.strerror or e}") from e
        out["plots"] = sorted(str(Path(plots) / n) for n in CHARTS)
    if plot:
        write_plot(plot, plan_chart(points, out["recommended"], str(target)))
        out["plot"] = plot
    click.echo(json.dumps(out, indent=2))


def _errors(prefix: str, e: ScenarioError) -> None:
    """A bad workload's message: one line per bad line of the file."""
    for line in str(e).splitlines():
        click.echo(f"{prefix}: {line}", err=True)


def tell(work: Workload, command: str) -> None:
    """What was inferred or left out of the workload, on stderr before the (long) run, one
    line each; the report repeats it (``note:`` lines, ``notes`` in JSON)."""
    for note in work.notes:
        click.echo(f"rsa sim {command}: note: {note}", err=True)


def check_plot(path: str | None) -> None:
    """--plot takes an .svg name; .png is refused before any work, in one line."""
    if path is None or path.lower().endswith(".svg"):
        return
    if path.lower().endswith(".png"):
        raise click.BadParameter(
            f"{path}: PNG is not written (rsa draws its charts as SVG itself, and no "
            "plotting library is installed with it): give a .svg name, and convert it with "
            "rsvg-convert (Debian package librsvg2-bin) if you need PNG", param_hint="--plot")
    raise click.BadParameter(f"{path}: give a file name ending in .svg",
                             param_hint="--plot")


def write_plot(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise click.ClickException(f"can't write the plot to {path}: "
                                   f"{e.strerror or e}") from e


def _ints(text: str, hint: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected whole numbers, comma separated",
                                 param_hint=hint) from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"{text!r}: give counts >= 1", param_hint=hint)
    return values


def _shares(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or not all(0.0 <= v <= 1.0 for v in values):
        raise click.BadParameter(f"{text!r}: expected shares between 0 and 1, comma "
                                 "separated (e.g. 0,0.5,1)", param_hint="--ram-shares")
    return values


def _node_spec(tier: Tier, text: str, hint: str) -> TierSpec:
    cap, sep, bw = text.partition(":")
    try:
        if not sep:
            raise ValueError("expected CAPACITY:BANDWIDTH, e.g. 128G:5G")
        spec = TierSpec(tier, 1, parse_size(cap), float(parse_size(bw)))
        if spec.capacity < 1 or spec.bw < 1:
            raise ValueError("CAPACITY and BANDWIDTH must be > 0")
    except ValueError as e:
        raise click.BadParameter(f"{text!r}: {e}", param_hint=hint) from e
    return spec


def render_replay(result: dict[str, Any]) -> str:
    """The two runs side by side."""
    base = result["baseline"]
    rows = [("", "with RSA", "baseline")]
    for key, label in (("jobs", "jobs"), ("mean_wait_s", "mean wait"),
                       ("mean_hold_s", "mean hold"), ("mean_io_s", "mean I/O"),
                       ("makespan_s", "makespan"), ("cost", "cost")):
        a, b = result[key], base[key]
        if key.endswith("_s"):
            rows.append((label, format_duration(a), format_duration(b)))
        else:
            rows.append((label, str(a), str(b)))
    rsa = result["rsa"]
    kind = "sacct output" if result.get("workload", {}).get("format") == "sacct" else "trace"
    out = [f"{kind} {result['trace']}: {result['jobs']} jobs replayed "
           f"({result['skipped']} skipped), {rsa['nodes']} RSA nodes, "
           f"stage-out ordering {rsa['ordering']}"]
    out += _table([(*r, "") for r in rows], indent="  ")
    out.append(f"  RSA: {rsa['tracked']} jobs tracked, {rsa['never_allocated']} started "
               f"before RSA nodes were theirs, {rsa['declined']} declined, "
               f"{rsa['read_from_rsa']} read their input from it, {rsa['wrote_to_rsa']} "
               f"wrote their output to it; mean stage-out "
               f"{format_duration(rsa['mean_stage_out_s'])}")
    tiers = "; ".join(f"{name} {t['nodes']} nodes, {t['held_node_hours']:g} of "
                      f"{t['node_hours']:g} node-hours held, cost {t['cost']:g}"
                      for name, t in rsa["tiers"].items())
    out.append(f"  cost: compute {result['compute_cost']:g} + RSA {result['rsa_cost']:g} "
               f"({tiers}); RSA utilisation {100 * rsa['utilisation']:.1f} %")
    vols = result.get("io_volumes")
    if vols:
        out.append(f"  I/O volumes: {vols['trace']} jobs from the workload's own figures, "
                   f"{vols['memory']} from their memory, {vols['synthetic']} from the "
                   "synthetic model (no I/O figures; docs/simulator.md)")
    out += [f"  note: {n}" for n in result.get("notes", ())]
    if result.get("plot"):
        out.append(f"  plot: {result['plot']}")
    return "\n".join(out)
