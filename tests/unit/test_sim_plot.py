"""``--plot FILE.svg`` of ``rsa sim replay`` (wait, hold and I/O time over time, with and
without the RSA) and ``rsa sim plan`` (cost against throughput, the recommendation
marked): well-formed SVG holding the series; the timeline's memory bounded; ``.png``
refused in one line before any work."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rsa_scheduler.cli.sim import sim
from rsa_scheduler.sim.svg import replay_chart
from rsa_scheduler.sim.timeline import Timeline
from tests.clirunner import cli_runner

SVG = "{http://www.w3.org/2000/svg}"
SMALL = Path(__file__).parent.parent / "data" / "swf" / "small.swf"


def series(root: ET.Element) -> dict[str, list[ET.Element]]:
    """data-name -> the <g class="series"> elements with that name."""
    out: dict[str, list[ET.Element]] = {}
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "series":
            out.setdefault(g.get("data-name", ""), []).append(g)
    return out


def test_timeline_means_per_interval_and_bounded_memory() -> None:
    tl = Timeline(width=10.0, max_bins=4)
    for run, wait in (("rsa", 1.0), ("baseline", 3.0)):
        tl.add(run, {"submit": 0.0, "start": wait, "end": wait + 5, "io_s": 2.0})
        tl.add(run, {"submit": 5.0, "start": 5 + 3 * wait, "end": 5 + 3 * wait + 1,
                     "io_s": 0.0})
    data = tl.series()
    assert data["wait"]["rsa"] == [(5.0, 2.0)] and data["wait"]["baseline"] == [(5.0, 6.0)]
    assert data["hold"]["rsa"] == [(5.0, 3.0)] and data["io"]["rsa"] == [(5.0, 1.0)]
    for t in range(100):  # 100 intervals of 10 s: coarsened to at most 4
        tl.add("rsa", {"submit": 10.0 * t, "start": 10.0 * t, "end": 10.0 * t + 1,
                       "io_s": 0.0})
    assert len(tl.runs["rsa"]) <= 4 and tl.width >= 250
    assert sum(acc[0] for acc in tl.runs["rsa"].values()) == 102  # no job lost
    with pytest.raises(ValueError):
        Timeline(width=0)


def test_replay_plot_is_svg_with_both_runs_in_three_panels(tmp_path: Path) -> None:
    out = tmp_path / "replay.svg"
    res = cli_runner().invoke(sim, ["replay", "--swf", str(SMALL), "--limit", "40",
                                    "--rsa-nodes", "4", "--plot", str(out), "--json"])
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["plot"] == str(out)
    root = ET.parse(out).getroot()  # well-formed XML
    assert root.tag == f"{SVG}svg"
    titles = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert any(t.startswith("Mean wait") for t in titles)
    assert any(t.startswith("Mean hold") for t in titles)
    assert any(t.startswith("Mean I/O time") for t in titles)
    found = series(root)
    assert sorted(found) == ["with the RSA", "without (baseline)"]
    assert all(len(gs) == 3 for gs in found.values())  # wait, hold, I/O
    for gs in found.values():
        for g in gs:
            assert g.find(f"{SVG}polyline") is not None and g.findall(f"{SVG}circle")


def test_plan_plot_marks_the_recommendation(tmp_path: Path) -> None:
    out = tmp_path / "plan.svg"
    res = cli_runner().invoke(sim, ["plan", "--swf", str(SMALL), "--limit", "40",
                                    "--target", "mean_io_s=1h", "--nodes", "2,4",
                                    "--ram-shares", "0,1", "--plot", str(out)])
    assert res.exit_code == 0, res.stderr
    rec = json.loads(res.stdout)["recommended"]
    root = ET.parse(out).getroot()
    found = series(root)
    assert sorted(found) == ["DRAM 0%", "DRAM 100%"]
    assert all(len(g[0].findall(f"{SVG}circle")) == 2 for g in found.values())  # 2 counts
    assert all(g[0].find(f"{SVG}polyline") is None for g in found.values())  # a scatter
    marks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "mark"]
    assert len(marks) == 1
    label = marks[0].find(f"{SVG}text")
    assert label is not None and label.text == (
        f"recommended: {rec['ram_nodes']} DRAM + {rec['ssd_nodes']} SSD")
    none = tmp_path / "none.svg"
    res = cli_runner().invoke(sim, ["plan", "--swf", str(SMALL), "--limit", "40",
                                    "--target", "mean_io_s=0.001s", "--nodes", "2",
                                    "--ram-shares", "1", "--plot", str(none)])
    assert res.exit_code == 0, res.stderr
    root = ET.parse(none).getroot()
    assert not [g for g in root.iter(f"{SVG}g") if g.get("class") == "mark"]
    assert any((t.text or "").endswith(": none met it") for t in root.iter(f"{SVG}text"))


@pytest.mark.parametrize("command", [["replay"], ["plan", "--target", "mean_io_s=5m"]])
def test_png_and_other_names_are_refused_in_one_line(tmp_path: Path,
                                                     command: list[str]) -> None:
    png = tmp_path / "out.png"
    res = cli_runner().invoke(sim, [*command, "--swf", str(SMALL), "--plot", str(png)])
    assert res.exit_code == 2 and not png.exists()
    assert f"{png}: PNG is not written" in res.stderr
    assert "rsvg-convert (Debian package librsvg2-bin)" in res.stderr
    other = cli_runner().invoke(sim, [*command, "--swf", str(SMALL), "--plot",
                                      str(tmp_path / "out.pdf")])
    assert other.exit_code == 2 and "give a file name ending in .svg" in other.stderr
    unwritable = cli_runner().invoke(sim, [*command, "--swf", str(SMALL), "--limit", "5",
                                           "--plot", str(tmp_path / "no" / "dir.svg")])
    assert unwritable.exit_code == 1
    assert "can't write the plot to " in unwritable.stderr


def test_replay_chart_points_carry_their_values() -> None:
    tl = Timeline(width=60.0)
    for run, io in (("rsa", 10.0), ("baseline", 40.0)):
        tl.add(run, {"submit": 0.0, "start": 30.0, "end": 130.0, "io_s": io})
        tl.add(run, {"submit": 90.0, "start": 100.0, "end": 150.0, "io_s": io / 2})
    root = ET.fromstring(replay_chart(tl))
    found = series(root)
    # panels in order wait, hold, I/O; x in seconds (the trace is short), the interval's
    # middle; y the mean of the jobs submitted in it
    tips = {name: [[(c.findtext(f"{SVG}title") or "") for c in g.findall(f"{SVG}circle")]
                   for g in gs] for name, gs in found.items()}
    assert tips["with the RSA"] == [
        ["with the RSA: 30, 30", "with the RSA: 90, 10"],
        ["with the RSA: 30, 100", "with the RSA: 90, 50"],
        ["with the RSA: 30, 10", "with the RSA: 90, 5"]]
    assert tips["without (baseline)"][2] == ["without (baseline): 30, 40",
                                             "without (baseline): 90, 20"]
