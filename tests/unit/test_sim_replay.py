"""Trace replay: the CLI's keys, the model's invariants (no job reads its RSA nodes before
its stage-in is done; the PFS's bandwidth and the RSA nodes' never exceeded; at most α
stage-outs under sjf/trio), memory bounded by active jobs, the replay check, and seed
004's file-per-process result in direction and size."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import pytest

from rsa_scheduler.cli.sim import parse_tiers, sim
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.policy import AllocationPolicy, Tier
from rsa_scheduler.sim import SimulationBroken
from rsa_scheduler.sim.cluster import ReplayConfig, TierSpec
from rsa_scheduler.sim.comparison import replay
from rsa_scheduler.sim.iomodel import FlowNet, IoParams
from rsa_scheduler.sim.replay import Replay
from rsa_scheduler.sim.swf import read_swf
from tests.clirunner import cli_runner

DATA = Path(__file__).parent.parent / "data"
SMALL = DATA / "swf" / "small.swf"
FPP = DATA / "swf" / "seed004-fpp.swf"
SCENARIO = DATA / "scenarios" / "normal.yaml"
KEYS = ("jobs", "mean_wait_s", "mean_hold_s", "mean_io_s", "cost")
GIB = 2**30
# seed 004 §4-5: 16 RSA nodes behind one Gigabit link (IOR: 100.31 MB/s to the RSA, 36.18
# MB/s to GPFS), 1024 Blue Gene/L nodes with 2 processes each
SEED004 = ["--tiers", "ram:16:32G:6269375", "--ratio", "64", "--max-nodes", "16",
           "--pfs-bw", "36180000", "--client-bw", "1G"]


def make_config(**kw: Any) -> ReplayConfig:
    base: dict[str, Any] = {"procs": 256, "procs_per_node": 16, "on_deck": 4}
    base.update(kw)
    return ReplayConfig(**base)


class CheckedNet(FlowNet):
    """The PFS, checked at every re-share (the engine's own check is not trusted here)."""

    def __init__(self, capacity: float, tier_bw: tuple[float, ...]) -> None:
        super().__init__(capacity)
        self.tier_bw = tier_bw
        self.saturated = 0
        self.max_outs = 0

    def _reshare(self) -> None:
        super()._reshare()
        rates, caps = self.rates(), self.caps()
        total = sum(rates.values())
        assert total <= self.capacity * (1 + 1e-9), f"PFS at {total} > {self.capacity}"
        for fid, rate in rates.items():
            assert rate <= caps[fid] * (1 + 1e-12), f"{fid} above its cap"
            if "/stage-" in fid:  # a staging flow runs at most at its RSA nodes' bandwidth
                counts = [caps[fid] / bw for bw in self.tier_bw]
                assert any(n == int(n) and 1 <= n <= 16 for n in counts), fid
        if total >= self.capacity * (1 - 1e-9):
            self.saturated += 1
        self.max_outs = max(self.max_outs, sum("/stage-out/" in f for f in rates))


def run_checked(cfg: ReplayConfig, path: Path = SMALL,
                observer: Any = None) -> tuple[Replay, CheckedNet]:
    run = Replay(read_swf(path), cfg, rsa=True, source=str(path), observer=observer)
    net = CheckedNet(cfg.io.pfs_bw, tuple(t.bw for t in cfg.tiers))
    run.net = net
    run.run()
    return run, net


# ---- the CLI -------------------------------------------------------------------------------

def test_cli_json_keys_and_determinism() -> None:
    runner = cli_runner()
    result = runner.invoke(sim, ["replay", "--swf", str(SMALL), "--json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    for key in KEYS:
        assert key in out and key in out["baseline"], key
    assert out["jobs"] == out["baseline"]["jobs"] == 300
    assert out["baseline"]["cost"] == out["baseline"]["compute_node_hours"]  # no RSA nodes
    assert out["cost"] > out["compute_node_hours"]  # 16 RAM nodes at 4 per node-hour
    assert "rsa" not in out["baseline"] and out["rsa"]["nodes"] == 16
    assert runner.invoke(sim, ["replay", "--swf", str(SMALL), "--json"]).output == result.output


def test_cli_text_limit_and_tiers() -> None:
    result = cli_runner().invoke(sim, ["replay", "--swf", str(SMALL), "--limit", "20",
                                       "--tiers", "ram:4,ssd:8:1T", "--ordering", "trio"])
    assert result.exit_code == 0, result.stderr
    assert "20 jobs replayed" in result.output and "12 RSA nodes" in result.output
    assert "stage-out ordering trio" in result.output
    assert "cost: compute " in result.output and "(ram 4 nodes, " in result.output
    assert "; ssd 8 nodes, " in result.output and "RSA utilisation " in result.output


def test_cli_bad_trace_exits_65(tmp_path: Path) -> None:
    bad = tmp_path / "bad.swf"
    bad.write_text("; MaxProcs: 64\n1 0 -1 10 4 -1 -1 4 60 -1 1 1 1 -1 1 1 -1 -1\n2 5 x\n"
                   "3 7 -1 10 4 -1 -1 4 60 -1 8 1 1 -1 1 1 -1 -1\n")
    result = cli_runner().invoke(sim, ["replay", "--swf", str(bad)])
    assert result.exit_code == 65
    # every bad line, each on its own line, before anything was replayed
    assert result.stderr.splitlines() == [
        f"rsa sim replay: {bad}:3: 3 fields, SWF has 18 (or 21 with rsa-scheduler's I/O "
        "columns)",
        f"rsa sim replay: {bad}:4: field 11 (status) is 8: SWF's are 1 completed, 0 failed, "
        "5 cancelled, 2-4 partial executions, -1 unknown"]
    assert result.stdout == ""
    plan = cli_runner().invoke(sim, ["plan", "--swf", str(bad), "--target", "mean_io_s=5m"])
    assert plan.exit_code == 65 and len(plan.stderr.splitlines()) == 2
    assert plan.stderr.startswith(f"rsa sim plan: {bad}:3: 3 fields")


def test_cli_option_errors(tmp_path: Path) -> None:
    runner = cli_runner()
    both = runner.invoke(sim, ["replay", "--swf", str(SMALL), "--rsa-nodes", "4",
                               "--tiers", "ram:4"])
    assert both.exit_code == 2 and "give --rsa-nodes or --tiers, not both" in both.stderr
    bad = runner.invoke(sim, ["replay", "--swf", str(SMALL), "--tiers", "ram:four"])
    assert bad.exit_code == 2 and "'ram:four'" in bad.stderr
    headless = tmp_path / "h.swf"
    headless.write_text("1 0 -1 10 4 -1 -1 4 60 -1 1 1 1 -1 1 1 -1 -1\n")
    nohead = runner.invoke(sim, ["replay", "--swf", str(headless), "--json"])
    assert nohead.exit_code == 0, nohead.stderr
    inferred = json.loads(nohead.stdout)
    assert inferred["workload"]["procs"] == 4 and inferred["jobs"] == 1
    assert inferred["notes"] == ["cluster: 4 processors, inferred from the trace: its "
                                 "largest job (line 1) uses 4 (no MaxProcs header; --procs "
                                 "sets it)"]
    ok = runner.invoke(sim, ["replay", "--swf", str(headless), "--procs", "8", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["jobs"] == 1
    assert json.loads(ok.stdout)["workload"]["procs"] == 8
    assert json.loads(ok.stdout)["notes"] == []
    sizeless = tmp_path / "s.swf"
    sizeless.write_text("1 0 -1 -1 -1 -1 -1 -1 60 -1 5 1 1 -1 1 1 -1 -1\n")
    none = runner.invoke(sim, ["replay", "--swf", str(sizeless)])
    assert none.exit_code == 65 and none.stderr.strip() == (
        f"rsa sim replay: {sizeless}: the trace has no MaxProcs header and no job that ran "
        "says how many processors it used: give --procs")
    neither = runner.invoke(sim, ["replay"])
    assert neither.exit_code == 2 and "--swf TRACE or --sacct FILE" in neither.stderr


def test_scenario_without_subcommand_still_runs() -> None:
    runner = cli_runner()
    plain = runner.invoke(sim, [str(SCENARIO)])
    named = runner.invoke(sim, ["run", str(SCENARIO)])
    assert plain.exit_code == named.exit_code == 0
    assert plain.output == named.output and "PASS" in plain.output


def test_tiers_auto_picks_each_jobs_tier_by_the_cost_model() -> None:
    """With two tiers every job asks #RSA_TIER=auto: the allocator's cost model decides."""
    def tiers_used(price: dict[Tier, float]) -> dict[str, list[int]]:
        ended: list[dict[str, Any]] = []

        def observe(what: str, now: float, detail: Mapping[str, Any]) -> None:
            if what == "job":
                ended.append(dict(detail))

        tiers = (TierSpec(Tier.RAM, 4, 16 * GIB, 5.0 * GIB),
                 TierSpec(Tier.SSD, 8, 1024 * GIB, 1.5 * GIB))
        policy = AllocationPolicy(default_tier=Tier.AUTO, price=price,
                                  bandwidth={Tier.RAM: 5 * GIB, Tier.SSD: 1536 << 20})
        run_checked(make_config(tiers=tiers, allocation=policy), observer=observe)
        return {t: [max(j["input_bytes"], j["output_bytes"]) for j in ended
                    if j["tier"] == t] for t in ("ram", "ssd")}

    # SSD nodes 4x cheaper, and fast enough for these volumes in 5 minutes: SSD, and RAM
    # only when the SSD nodes are all taken (the fallback)
    cheap_ssd = tiers_used({Tier.RAM: 4.0, Tier.SSD: 1.0})
    assert len(cheap_ssd["ssd"]) > 3 * len(cheap_ssd["ram"])
    # RAM nodes cheaper: what fits the RAM tier goes there (SSD when RAM is busy), what
    # does not fit goes to SSD
    cheap_ram = tiers_used({Tier.RAM: 1.0, Tier.SSD: 4.0})
    ram_limit = 4 * 16 * GIB  # max_request 16 > 4 nodes: the whole tier
    assert max(cheap_ram["ram"]) <= ram_limit < max(cheap_ram["ssd"])
    assert len(cheap_ram["ram"]) > len(cheap_ssd["ram"])


def test_parse_tiers() -> None:
    (ram, ssd) = parse_tiers("ram:2:64G:1G,ssd:3")
    assert ram == TierSpec(Tier.RAM, 2, 64 * GIB, float(GIB))
    assert (ssd.tier, ssd.count, ssd.capacity) == (Tier.SSD, 3, 128 * GIB)
    for not_a_node_tier in ("auto:2", "nvme:2"):
        with pytest.raises(click.BadParameter):
            parse_tiers(not_a_node_tier)


# ---- invariants ------------------------------------------------------------------------------

def test_no_job_reads_its_rsa_nodes_before_its_stage_in_is_done() -> None:
    seen: list[tuple[str, float, dict[str, Any]]] = []

    def observe(what: str, now: float, detail: Mapping[str, Any]) -> None:
        seen.append((what, now, dict(detail)))

    run_checked(make_config(), observer=observe)
    staged: dict[str, float] = {}
    started: dict[str, float] = {}
    rsa_reads = pfs_reads_after_stage_in = 0
    for what, now, d in seen:
        if what == "outcome" and d["kind"] == "stage-in":
            staged[d["job"]] = now
        elif what == "outcome" and d["kind"] == "mount-input":
            started.setdefault(d["job"], now)
        elif what == "read" and d["rsa"]:
            assert d["job"] in staged, f"job {d['job']} read its RSA nodes, never staged"
            assert staged[d["job"]] <= now
            assert started[d["job"]] <= now  # and the input mount was confirmed first
            rsa_reads += 1
        elif what == "read" and d["job"] not in staged and d["bytes"]:
            pfs_reads_after_stage_in += 1
    assert rsa_reads >= 20  # not vacuous: many jobs read their staged input
    assert pfs_reads_after_stage_in > 0  # and others started earlier and read the PFS


def test_broken_staging_is_caught() -> None:
    """The engine's own check fires when a job would read unstaged RSA nodes."""
    run = Replay(read_swf(SMALL), make_config(), rsa=True, source="small")
    original = run._deliver

    def forget_staging(jid: str, fl: Any) -> None:
        original(jid, fl)
        job = run.jobs.get(jid)
        if job is not None:
            job.staged_at = None  # as if the stage-in had never ended

    run._deliver = forget_staging  # type: ignore[method-assign]
    with pytest.raises(SimulationBroken, match="reads its RSA nodes before its stage-in"):
        run.run()


@pytest.mark.parametrize("ordering", ["fifo", "sjf", "trio"])
def test_pfs_and_rsa_bandwidth_never_exceeded(ordering: str) -> None:
    cfg = make_config(io=IoParams(pfs_bw=2 * GIB), ordering=ordering, alpha=1, on_deck=8)
    run, net = run_checked(cfg)
    assert net.saturated > 50  # the PFS was contended: the checks were exercised
    assert net.peak <= cfg.io.pfs_bw * (1 + 1e-9)
    if ordering == "fifo":
        assert net.max_outs > 1  # stage-outs overlap when nothing orders them ...
    else:
        assert net.max_outs == 1  # ... and at most α at a time when ordered
    assert run.totals.jobs == 300


def test_memory_is_bounded_by_active_jobs(tmp_path: Path) -> None:
    trace = tmp_path / "spread.swf"
    lines = ["; MaxProcs: 64", "; MaxNodes: 4"]
    lines += [f"{i} {i * 1000} -1 300 16 -1 -1 16 600 -1 1 1 1 -1 1 1 -1 -1"
              for i in range(1, 1501)]
    trace.write_text("\n".join(lines) + "\n")
    cfg = ReplayConfig(procs=64, procs_per_node=16, check_every=500)
    run = Replay(read_swf(trace), cfg, rsa=True, source=str(trace))
    totals = run.run()
    assert totals.jobs == 1500
    assert totals.max_active <= 2  # one job at a time, however long the trace
    assert totals.checks >= 10  # the log was replay-checked window by window ...
    assert run.sched.records == {} and run.checks.log == []  # ... and nothing is kept after it


def test_replay_check_catches_a_diverging_log() -> None:
    logged: list[Event] = []
    run = Replay(read_swf(SMALL), make_config(limit=30), rsa=True, source="small")
    original = run._apply

    def keep(dec: Any) -> None:
        logged.extend(dec.events)
        original(dec)

    run._apply = keep  # type: ignore[method-assign]
    run.run()
    assert run.sched.records == {}  # all forgotten at the end
    run.checks.log, run.checks.base = logged[: len(logged) // 2], None
    run.checks.window = 0
    with pytest.raises(SimulationBroken, match="replay of the log differs from the live"):
        run._checkpoint()


def test_sampled_checks_give_the_same_result() -> None:
    full = replay(lambda: read_swf(SMALL), make_config(check_every=200))
    sampled = replay(lambda: read_swf(SMALL), make_config(check_every=200, check_stride=5))
    assert full["rsa"]["replay_checks"] > sampled["rsa"]["replay_checks"] >= 1
    full["rsa"].pop("replay_checks")
    sampled["rsa"].pop("replay_checks")
    assert full == sampled


# ---- seed 004 ------------------------------------------------------------------------------

def test_seed004_file_per_process_output_is_much_shorter_with_the_rsa() -> None:
    """Table 2: 2048 files written directly 1109.86 s, to the RSA 35.87 s (31x)."""
    result = cli_runner().invoke(sim, ["replay", "--swf", str(FPP), *SEED004, "--json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["rsa"]["wrote_to_rsa"] == 1
    assert out["mean_wait_s"] == out["baseline"]["mean_wait_s"]  # job 2 waits for job 1
    # job 1 does no I/O: the means are job 2's output time halved
    direct, via_rsa = 2 * out["baseline"]["mean_io_s"], 2 * out["mean_io_s"]
    assert direct / via_rsa > 5  # paper 31x; why ours is smaller: docs/simulator.md
    assert via_rsa < 60 and direct > 100
    assert out["mean_hold_s"] < out["baseline"]["mean_hold_s"]


def test_per_job_lines_and_the_per_file_cost(tmp_path: Path) -> None:
    """With the create cost fitted to Table 2 itself ((1109.86 s - 2 GiB at 36.18 MB/s) /
    2048 files), the direct write takes Table 2's time: the per-file term is applied once
    per file, in series, on top of the transfer."""
    lines = tmp_path / "jobs.jsonl"
    fitted = (1109.86 - 2 * GIB / 36.18e6) / 2048
    result = cli_runner().invoke(sim, ["replay", "--swf", str(FPP), *SEED004, "--stage-out",
                                       "tar", "--pfs-create", f"{fitted:.6f}",
                                       "--per-job", str(lines), "--json"])
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [(r["run"], r["job"]) for r in rows] == [("rsa", "1"), ("rsa", "2"),
                                                   ("baseline", "1"), ("baseline", "2")]
    direct, via_rsa = rows[3], rows[1]
    assert direct["write"] == "pfs" and via_rsa["write"] == "rsa"
    assert direct["io_s"] == pytest.approx(1109.86, abs=0.01)
    assert via_rsa["output_files"] == 2048 and via_rsa["rsa_nodes"] == 16
    # tar: one file created on the PFS, 2 GiB at 36.18 MB/s, then verify and destroy
    assert via_rsa["released"] - via_rsa["end"] == pytest.approx(
        0.001 + 2 * GIB / 36.18e6 + 30 + 10, abs=0.01)


def test_seed003_ordered_stage_outs_end_sooner_on_average() -> None:
    """16 stage-outs start together on a 2 GiB/s PFS: α = 2 at a time, smallest first,
    lowers the mean time from job end to RSA nodes released (seed 003: -37%)."""
    burst = DATA / "swf" / "seed003-burst.swf"
    mean: dict[str, float] = {}
    for ordering in ("fifo", "trio"):
        done: list[float] = []

        def per_job(run: str, d: Mapping[str, Any], into: list[float] = done) -> None:
            if run == "rsa" and d["job"] != "1":
                into.append(d["released"] - d["end"])

        cfg = ReplayConfig(procs=1024, procs_per_node=16, on_deck=16, ordering=ordering,
                           alpha=2, io=IoParams(pfs_bw=2 * GIB))
        out = replay(lambda: read_swf(burst), cfg, per_job=per_job)
        assert out["rsa"]["wrote_to_rsa"] == len(done) == 16
        mean[ordering] = sum(done) / len(done)
    assert mean["trio"] < 0.8 * mean["fifo"]


def test_early_start_wait_holds_jobs_until_staged() -> None:
    """Under ``wait`` no job that got RSA nodes before it started reads the PFS: its
    Prolog holds it (on its compute nodes) until the stage-in is done; under
    ``fallback`` such jobs read the PFS at once (seed 004 §3.1)."""
    from rsa_scheduler.core.policy import EarlyStart, ResetTrigger, StagingPolicy

    fell_back: dict[str, int] = {}
    held_longest: dict[str, float] = {}
    for policy in (EarlyStart.FALLBACK, EarlyStart.WAIT):
        reads: dict[str, float] = {}
        ended: list[dict[str, Any]] = []

        def observe(what: str, now: float, d: Mapping[str, Any],
                    reads: dict[str, float] = reads,
                    ended: list[dict[str, Any]] = ended) -> None:
            if what == "read":
                reads[d["job"]] = now
            elif what == "job":
                ended.append(dict(d))

        staging = StagingPolicy(reset_trigger=ResetTrigger.INPUT_DONE, early_start=policy)
        run_checked(make_config(staging=staging), observer=observe)
        allocated = [j for j in ended if j["rsa_nodes"] and j["input_bytes"]]
        fell_back[policy] = sum(j["read"] == "pfs" for j in allocated)
        held_longest[policy] = max(reads[j["job"]] - j["start"] for j in allocated)
    assert fell_back[EarlyStart.FALLBACK] > 0
    assert fell_back[EarlyStart.WAIT] == 0
    assert held_longest[EarlyStart.FALLBACK] <= 2.0  # at most the input mount
    assert held_longest[EarlyStart.WAIT] > 10.0  # held for a stage-in


def test_real_traces_replay_and_the_report_says_what_was_inferred() -> None:
    zero = DATA / "swf" / "generated-from-zero.swf"
    text = cli_runner().invoke(sim, ["replay", "--swf", str(zero), "--rsa-nodes", "2"])
    assert text.exit_code == 0, text.stderr
    assert f"trace {zero}: 4 jobs replayed (1 skipped)" in text.output
    assert ("  note: cluster: 28 processors, inferred from the trace: its jobs held 28 at "
            "once (at 20 s); its largest job (line 13) uses 16 (no MaxProcs header; --procs "
            "sets it)") in text.output.splitlines()
    assert ("  I/O volumes: 0 jobs from the workload's own figures, 0 from their memory, 4 "
            "from the synthetic model (no I/O figures; docs/simulator.md)"
            ) in text.output.splitlines()
    # what was inferred is said on stderr too, before the run
    assert text.stderr.splitlines() == [
        "rsa sim replay: note: cluster: 28 processors, inferred from the trace: its jobs "
        "held 28 at once (at 20 s); its largest job (line 13) uses 16 (no MaxProcs header; "
        "--procs sets it)"]
    plan = cli_runner().invoke(sim, ["plan", "--swf", str(zero), "--nodes", "2",
                                     "--ram-shares", "1", "--target", "mean_io_s=1h"])
    assert plan.exit_code == 0, plan.stderr
    assert plan.stderr.startswith("rsa sim plan: note: cluster: 28 processors, inferred ")
    assert json.loads(plan.stdout)["notes"][0].startswith("cluster: 28 processors")
    # job 1's partial executions are passed over: it runs once, for its summary's time
    pwa = cli_runner().invoke(sim, ["replay", "--swf", str(DATA / "swf" /
                                                         "pwa-checkpoint.swf"), "--json"])
    assert pwa.exit_code == 0, pwa.stderr
    out = json.loads(pwa.stdout)
    assert (out["jobs"], out["skipped"], out["notes"]) == (4, 1, [])
    assert out["workload"] == {"format": "swf", "procs": 64, "procs_per_node": 4}


def test_the_docs_worked_example_on_a_busy_generated_trace(tmp_path: Path) -> None:
    """docs/simulator.md's worked example: a trace as a workload generator writes it (jobs
    from 0, no MaxProcs), on a 1 GB/s PFS; its figures are quoted there."""
    busy = DATA / "swf" / "generated-busy.swf"
    common = ["--swf", str(busy), "--procs-per-node", "8", "--pfs-bw", "1G"]
    plot = tmp_path / "replay.svg"
    res = cli_runner().invoke(sim, ["replay", *common, "--rsa-nodes", "4", "--plot",
                                    str(plot)])
    assert res.exit_code == 0, res.stderr
    assert res.stderr == ("rsa sim replay: note: cluster: 64 processors, inferred from the "
                          "trace: its largest job (line 20) uses 64 (no MaxProcs header; "
                          "--procs sets it)\n")
    lines = res.stdout.splitlines()
    assert lines[0] == (f"trace {busy}: 12 jobs replayed (0 skipped), 4 RSA nodes, "
                        "stage-out ordering fifo")
    assert "  mean I/O   00:01:27  00:02:09" in lines
    assert "  mean wait  00:27:26  00:29:11" in lines
    assert ("  I/O volumes: 0 jobs from the workload's own figures, 9 from their memory, 3 "
            "from the synthetic model (no I/O figures; docs/simulator.md)") in lines
    assert plot.exists()
    plan_plot = tmp_path / "plan.svg"
    res = cli_runner().invoke(sim, ["plan", *common, "--nodes", "1,2,4,8", "--target",
                                    "mean_io_s=1:40", "--plot", str(plan_plot)])
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    rec = out["recommended"]
    assert (rec["ram_nodes"], rec["ssd_nodes"], rec["rsa_cost_per_hour"]) == (1, 1, 5.0)
    assert rec["mean_io_s"] == pytest.approx(99.06, abs=0.01)
    assert out["saving_vs_ram_only"] == 0.375 and out["baseline"]["mean_io_s"] == \
        pytest.approx(129.33, abs=0.01)
    assert "recommended: 1 DRAM + 1 SSD" in plan_plot.read_text()
