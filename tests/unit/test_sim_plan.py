"""``rsa sim plan``: the sweep, the target, the recommendation, seed 000's comparisons and
the hand-written SVG charts (rsa_scheduler.sim.plan, rsa_scheduler.sim.svg)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.cli.sim import sim
from rsa_scheduler.sim.plan import Target, mixes, parse_target, recommend
from rsa_scheduler.sim.svg import line_chart, nice_ticks, plan_charts
from tests.clirunner import cli_runner

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent.parent / "data"
SMALL = DATA / "swf" / "small.swf"
SEED000 = DATA / "swf" / "seed000-checkpoint.swf"
SVG = "{http://www.w3.org/2000/svg}"


def point(ram: int, ssd: int, cost: float, io: float, thr: float) -> dict[str, Any]:
    return {"ram_nodes": ram, "ssd_nodes": ssd, "nodes": ram + ssd,
            "ram_share": ram / (ram + ssd), "rsa_cost_per_hour": cost, "mean_io_s": io,
            "io_throughput": thr}


def test_parse_target() -> None:
    assert parse_target("mean_io_s=5m") == Target("mean_io_s", 300.0)
    assert parse_target("mean_wait_s <= 1:00:00") == Target("mean_wait_s", 3600.0)
    assert parse_target("io_throughput>=2G") == Target("io_throughput", 2.0 * 2**30)
    assert str(parse_target("io_throughput=2G")) == "io_throughput >= 2G/s"
    for bad, says in (("mean_io=5m", "KEY one of mean_wait_s"),
                      ("mean_io_s>=5m", "bounded from above"),
                      ("io_throughput<=1G", "bounded from below"),
                      ("mean_io_s=soon", "invalid duration"),
                      ("mean_io_s=0", "must be > 0")):
        with pytest.raises(ValueError, match=says):
            parse_target(bad)


def test_target_met() -> None:
    assert Target("mean_io_s", 10).met({"mean_io_s": 10.0})
    assert not Target("mean_io_s", 10).met({"mean_io_s": 10.5})
    assert Target("io_throughput", 10).met({"io_throughput": 11})
    assert not Target("io_throughput", 10).met({"io_throughput": 9})


def test_mixes_are_distinct_and_in_order() -> None:
    assert mixes([2, 4], [0, 0.5, 1]) == [(0, 2), (1, 1), (2, 0), (0, 4), (2, 2), (4, 0)]
    assert mixes([1], [0, 0.25, 0.5, 1]) == [(0, 1), (1, 0)]


def test_recommend_the_cheapest_meeting_and_seed000_comparisons() -> None:
    target = Target("mean_io_s", 100.0)
    points = [point(4, 0, 16.0, 50.0, 8.0),   # DRAM only, meets, 16/h
              point(8, 0, 32.0, 40.0, 9.0),   # DRAM only, meets, dearer
              point(2, 4, 12.0, 90.0, 6.0),   # mix, meets, 12/h
              point(0, 8, 8.0, 150.0, 5.0),   # SSD only, cheapest, misses the target
              point(4, 8, 24.0, 45.0, 12.0)]  # mix, meets, fastest within 32/h
    for p in points:
        p["meets"] = target.met(p)
    out = recommend(points, target)
    assert out["recommended"]["rsa_cost_per_hour"] == 12.0
    assert out["ram_only"]["rsa_cost_per_hour"] == 16.0
    assert out["saving_vs_ram_only"] == pytest.approx(0.25)
    # at the DRAM-only cost (16/h): DRAM only gives 8, the 12/h mix 6: no gain within it
    assert out["throughput_gain_at_ram_only_cost"] == 0.0
    points[2]["io_throughput"] = 10.0
    assert recommend(points, target)["throughput_gain_at_ram_only_cost"] == pytest.approx(0.25)
    for p in points:
        p["meets"] = False
    nothing = recommend(points, target)
    assert nothing["recommended"] is None and nothing["saving_vs_ram_only"] is None


def test_nice_ticks() -> None:
    assert nice_ticks(0, 10) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(3, 3) == [3, 4, 5, 6]
    ticks = nice_ticks(0.0, 0.73)
    assert ticks[0] <= 0.0 and ticks[-1] >= 0.73 and len(ticks) <= 8


def test_line_chart_is_svg_with_every_point_inside_the_plot() -> None:
    text = line_chart("T & t", "x", "y", {"a": [(1, 5.0), (4, 2.0)], "b": [(1, 1.0)]})
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg"
    circles = root.findall(f".//{SVG}circle")
    assert len(circles) == 3
    frame = next(r for r in root.findall(f"{SVG}rect") if r.get("fill") == "none")
    x0, y0 = float(frame.get("x", 0)), float(frame.get("y", 0))
    x1, y1 = x0 + float(frame.get("width", 0)), y0 + float(frame.get("height", 0))
    for c in circles:
        assert x0 <= float(c.get("cx", -1)) <= x1 and y0 <= float(c.get("cy", -1)) <= y1
    assert len(root.findall(f".//{SVG}polyline")) == 2
    with pytest.raises(ValueError, match="no points"):
        line_chart("empty", "x", "y", {})


def test_plan_charts_one_line_per_dram_share() -> None:
    pts = [dict(point(r, n - r, 4.0 * r + n - r, 10.0, 1.0), mean_wait_s=1.0,
                mean_hold_s=2.0, utilisation=0.5) for n in (2, 4) for r in (0, n)]
    charts = plan_charts(pts)
    assert sorted(charts) == ["cost.svg", "hold.svg", "utilisation.svg", "wait.svg"]
    root = ET.fromstring(charts["cost.svg"])
    assert len(root.findall(f".//{SVG}polyline")) == 2  # DRAM 100 % and 0 %
    labels = [t.text for t in root.findall(f"{SVG}text")]
    assert "DRAM 100%" in labels and "DRAM 0%" in labels


# ---- the command -----------------------------------------------------------------------

def test_plan_cli_recommends_the_cheapest_meeting_point(tmp_path: Path) -> None:
    runner = cli_runner()
    res = runner.invoke(sim, ["plan", "--swf", str(SMALL), "--limit", "60", "--target",
                              "mean_io_s=30s", "--nodes", "2,4", "--ram-shares", "0,0.5,1",
                              "--plots", str(tmp_path / "plots")])
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    points = out["points"]
    assert [(p["ram_nodes"], p["ssd_nodes"]) for p in points] == [
        (0, 2), (1, 1), (2, 0), (0, 4), (2, 2), (4, 0)]
    meeting = [p for p in points if p["mean_io_s"] <= 30.0]
    assert all(p["meets"] == (p in meeting) for p in points)
    best = min(p["rsa_cost_per_hour"] for p in meeting)
    assert out["recommended"]["rsa_cost_per_hour"] == best
    # cost per hour: 4 per DRAM node, 1 per SSD node (the default --prices)
    assert all(p["rsa_cost_per_hour"] == 4 * p["ram_nodes"] + p["ssd_nodes"] for p in points)
    assert out["baseline"]["jobs"] == 60
    assert set(out) >= {"target", "recommended", "ram_only", "saving_vs_ram_only",
                        "throughput_gain_at_ram_only_cost", "baseline", "points", "plots"}
    for name in ("wait.svg", "hold.svg", "utilisation.svg", "cost.svg"):
        ET.parse(tmp_path / "plots" / name)  # well-formed


def test_plan_cli_errors_are_one_line(tmp_path: Path) -> None:
    runner = cli_runner()
    bad = runner.invoke(sim, ["plan", "--swf", str(SMALL), "--target", "mean_io=5m"])
    assert bad.exit_code == 2 and "--target" in bad.stderr and "KEY one of" in bad.stderr
    bad = runner.invoke(sim, ["plan", "--swf", str(SMALL), "--target", "mean_io_s=5m",
                              "--ram-shares", "0,2"])
    assert bad.exit_code == 2 and "shares between 0 and 1" in bad.stderr
    bad = runner.invoke(sim, ["plan", "--swf", str(SMALL), "--target", "mean_io_s=5m",
                              "--ssd", "2T"])
    assert bad.exit_code == 2 and "CAPACITY:BANDWIDTH" in bad.stderr
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 8\n1 0 -1 ten 4 -1 -1 4 60 -1 1 1 1 -1 1 1 -1 -1\n")
    broken = runner.invoke(sim, ["plan", "--swf", str(trace), "--target", "mean_io_s=5m"])
    assert broken.exit_code == 65
    (line,) = broken.stderr.strip().splitlines()
    assert line.startswith(f"rsa sim plan: {trace}:2: ")


# ---- seed 000 ----------------------------------------------------------------------------

SEED000_ARGS = ["--ram", "16G:4G", "--ssd", "32G:175M", "--prices", "ram=16,ssd=6.4",
                "--io-time", "5m", "--target", "mean_io_s=5m", "--ratio", "64",
                "--max-nodes", "128", "--pfs-bw", "512M", "--on-deck", "4"]


def test_seed000_ssd_saves_cost_at_fixed_io_time_and_gains_throughput_at_fixed_cost(
        ) -> None:
    """docs/simulator.md: seed 000's two headline results, in direction and rough size."""
    res = cli_runner().invoke(sim, ["plan", "--swf", str(SEED000), "--nodes",
                                    "16,32,48,64,96,128", "--ram-shares", "0,0.25,0.5,0.75,1",
                                    *SEED000_ARGS])
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    # the figures docs/simulator.md shows beside the paper's 41.5 % and 59.3 %
    assert (out["recommended"]["ram_nodes"], out["recommended"]["ssd_nodes"]) == (0, 48)
    assert (out["ram_only"]["ram_nodes"], out["ram_only"]["ssd_nodes"]) == (48, 0)
    assert out["saving_vs_ram_only"] == pytest.approx(0.6)
    # with allocation.mix (rsad's default) a job may run on a DRAM+SSD mix paced by the
    # SSD instead of waiting for DRAM nodes: a little less throughput than without
    assert out["throughput_gain_at_ram_only_cost"] == pytest.approx(0.3834, abs=1e-4)
    assert out["baseline"]["mean_io_s"] > 300 >= out["recommended"]["mean_io_s"]
    res = cli_runner().invoke(sim, ["plan", "--swf", str(SEED000), "--nodes", "48,64",
                                    "--ram-shares", "0,0.5,1", "--no-mix", *SEED000_ARGS])
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["throughput_gain_at_ram_only_cost"] == pytest.approx(
        0.4115, abs=1e-4)


def test_replay_cost_is_the_cost_model_and_utilisation_is_what_jobs_held() -> None:
    res = cli_runner().invoke(sim, ["replay", "--swf", str(SMALL), "--limit", "80", "--tiers",
                                    "ram:3:128G:5G,ssd:5:2T:1536M", "--prices",
                                    "compute=2,ram=6,ssd=1.5", "--json"])
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    hours = out["makespan_s"] / 3600
    assert out["rsa_cost"] == pytest.approx((3 * 6 + 5 * 1.5) * hours, rel=1e-3)
    assert out["compute_cost"] == pytest.approx(2 * out["compute_node_hours"], rel=1e-3)
    assert out["cost"] == pytest.approx(out["compute_cost"] + out["rsa_cost"], abs=0.01)
    tiers = out["rsa"]["tiers"]
    assert set(tiers) == {"ram", "ssd"}
    held = 0.0
    for t in tiers.values():
        assert 0 <= t["held_node_hours"] <= t["node_hours"] + 1e-6
        assert t["utilisation"] == pytest.approx(t["held_node_hours"] / t["node_hours"],
                                                 abs=1e-3)
        held += t["held_node_hours"]
    assert held > 0  # jobs did hold RSA nodes
    assert out["rsa"]["utilisation"] == pytest.approx(held / out["rsa_node_hours"], abs=1e-3)
    assert out["baseline"]["rsa_cost"] == 0.0
