"""The scenario simulator: every shipped scenario passes (and is deterministic), the engine
catches broken invariants, and scenario format errors name file, line, key and reason."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from rsa_scheduler.cli.sim import sim
from rsa_scheduler.core.actions import Result
from rsa_scheduler.core.states import TERMINAL
from rsa_scheduler.errors import ScenarioError
from rsa_scheduler.sim import (
    SimulationBroken,
    engine,
    load_scenario,
    parse_scenario,
    scenario,
    simulate,
)
from rsa_scheduler.sim.engine import Engine
from tests.clirunner import cli_runner

SCENARIOS = Path(__file__).parent.parent / "data" / "scenarios"
ALL = sorted(SCENARIOS.glob("*.yaml"))


def make_scenario(body: str, source: str = "test.yaml") -> str:
    """A minimal valid scenario with ``body`` appended (YAML text)."""
    return textwrap.dedent("""\
        pool:
          - names: rsa[1-4]
        allocation: {ratio: 2}
        jobs:
          10:
            nodes: 4
            directives: {data_in: /scratch/a/in, data_out: /scratch/a/out}
        """) + textwrap.dedent(body)


TIMELINE = textwrap.dedent("""\
    timeline:
      - {at: 0, job: 10, state: PENDING, reason: Resources}
      - {at: 10m, job: 10, state: RUNNING}
      - {at: 1h, job: 10, state: COMPLETED}
    """)


def test_scenarios_exist() -> None:
    assert len(ALL) >= 30


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_scenario(path: Path) -> None:
    scenario = load_scenario(path)
    if scenario.known_bug:
        pytest.xfail(f"known core bug: {scenario.known_bug}")
    result = simulate(scenario, replay_every_step=True)
    assert result.passed, "\n".join(result.failures)
    assert result.checked > 0, "a shipped scenario must expect something"


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_scenario_is_deterministic(path: Path) -> None:
    runs = [json.dumps(simulate(load_scenario(path)).to_json(), indent=2) for _ in range(2)]
    assert runs[0] == runs[1]


def test_known_bug_scenarios_still_fail() -> None:
    """A fixed bug shows up here: drop the scenario's known_bug key then."""
    for path in ALL:
        scenario = load_scenario(path)
        if scenario.known_bug:
            assert not simulate(scenario).passed, f"{path.name} passes: remove known_bug"


# ---- CLI ------------------------------------------------------------------------------------

def test_cli_human_and_json() -> None:
    runner = cli_runner()
    path = str(SCENARIOS / "normal.yaml")
    human = runner.invoke(sim, [path])
    assert human.exit_code == 0, human.output
    assert "PASS" in human.output and "mounted-output" in human.output
    assert "pool: free rsa[1-4]" in human.output
    js = runner.invoke(sim, [path, "--json"])
    assert js.exit_code == 0
    doc = json.loads(js.output)
    assert doc["passed"] is True
    assert doc["jobs"]["10"]["final"]["rsa_state"] == "released"
    assert doc["pool"] == {"free": "rsa[1-4]", "drained": "", "down": "", "held": {}}
    assert js.output == runner.invoke(sim, [path, "--json"]).output


def test_cli_expectation_failure_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(make_scenario(TIMELINE) + "expect: {jobs: {10: {rsa_state: quarantined}}}\n")
    result = cli_runner().invoke(sim, [str(path)])
    assert result.exit_code == 1
    assert "FAILED: job 10: rsa_state is released, expected quarantined" in result.output


def test_cli_bad_scenario_exits_65(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("pool: []\njobs: {}\ntimeline: []\n")
    result = cli_runner().invoke(sim, [str(path)])
    assert result.exit_code == 65
    assert "pool: the pool needs at least one entry" in result.output


def test_cli_missing_file_exits_65(tmp_path: Path) -> None:
    result = cli_runner().invoke(sim, [str(tmp_path / "nope.yaml")])
    assert result.exit_code == 65
    assert "cannot read scenario" in result.output


# ---- engine behaviour -----------------------------------------------------------------------

def test_outcome_steps_cover_attempts_in_order() -> None:
    steps = "[{result: failed, times: 2}, {result: ok, duration: 7s}]"
    sc = parse_scenario(make_scenario("staging: {backoff: 10s}\n" + TIMELINE).replace(
        "directives:", f"actions: {{stage-out: {steps}}}\n    directives:"))
    result = simulate(sc)
    job = result.jobs["10"]
    assert job.counts["stage-out"] == 3
    rows = [r for r in job.rows if r.trigger == "stage-out-done"]
    starts = [r for r in job.rows if r.rsa_state == "staging-out"]
    assert rows[0].t - starts[-1].t == 7


def test_crash_reissues_outstanding_action_with_same_id() -> None:
    sc = parse_scenario(make_scenario(TIMELINE + "  - {at: 2m, crash: true}\n"))
    result = simulate(sc)
    crash = [n for n in result.notes if n["event"] == "crash"]
    assert crash == [{"t": 120, "event": "crash", "lost": ["10/1/stage-in/3"],
                      "reissued": ["10/1/stage-in/3"]}]
    assert result.jobs["10"].final["rsa_state"] == "released"


def test_simultaneous_observations_form_one_snapshot() -> None:
    """Job 11 has the higher priority; seen in the same snapshot it is allocated first."""
    text = textwrap.dedent("""\
        pool:
          - names: rsa[1-2]
        allocation: {ratio: 2}
        jobs:
          10: {nodes: 2, priority: 1, directives: {data_out: /scratch/a/out}}
          11: {nodes: 2, priority: 9, directives: {data_out: /scratch/b/out}}
        timeline:
          - {at: 0, job: 10, state: PENDING, reason: Resources}
          - {at: 0, job: 11, state: PENDING, reason: Resources}
        """)
    result = simulate(parse_scenario(text))
    assert result.jobs["11"].allocations == ["rsa1"]
    assert result.jobs["10"].allocations == ["rsa2"]


def test_engine_detects_a_leaked_node() -> None:
    """An invariant violation (here: a node taken behind the core's back) fails loudly."""
    engine = Engine(parse_scenario(make_scenario(TIMELINE)))
    engine.pool.adopt("999", "rsa4")
    with pytest.raises(SimulationBroken, match="leak"):
        engine.run()


def test_engine_detects_replay_divergence() -> None:
    engine = Engine(parse_scenario(make_scenario(TIMELINE)))
    engine.run()
    engine.sched.records["10"].priority = 12345  # not in the log
    with pytest.raises(SimulationBroken, match="replay of the log differs"):
        engine._check_replay()


def test_busy_is_only_a_reset_result() -> None:
    assert Result.BUSY.value == "busy"
    with pytest.raises(ScenarioError, match=r"jobs\.10\.actions\.stage-in\.result: busy"):
        parse_scenario(make_scenario(TIMELINE).replace(
            "directives:", "actions: {stage-in: {result: busy}}\n    directives:"))


# ---- format errors --------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "message"), [
    ("timeline: []\nfoo: 1\n", r"test\.yaml:\d+: foo: unknown key; known keys"),
    ("timeline: []\nstagin: {}\n", r"stagin: unknown key; did you mean 'staging'\?"),
    ("timeline:\n  - {at: 0, job: 11, state: RUNNING}\n",
     r"timeline\[0\]\.job: job 11 is not defined under 'jobs'"),
    ("timeline:\n  - {at: 0, job: 10, state: RUNING}\n",
     r"timeline\[0\]\.state: unknown Slurm job state 'RUNING'; did you mean RUNNING\?"),
    ("timeline:\n  - {at: soon, job: 10, state: RUNNING}\n",
     r"timeline\[0\]\.at: invalid duration 'soon'"),
    ("timeline:\n  - {at: 0, job: 10}\n", r"timeline\[0\]: give exactly one of"),
    ("timeline:\n  - {at: 0, node: rsa9, set: drained}\n",
     r"timeline\[0\]\.node: rsa9 is not in the pool"),
    ("timeline:\n  - {at: 0, node: rsa1, set: broken}\n",
     r"timeline\[0\]\.set: 'broken' is not one of up, drained, down"),
    ("timeline:\n  - {at: 0, job: 10, command: explode}\n",
     r"timeline\[0\]\.command: 'explode' is not one of"),
    ("timeline:\n  - {at: 0, job: 10, command: on-deck}\n",
     r"timeline\[0\]\.command: 'on-deck' is not a command"),
    ("timeline:\n  - {at: 0, crash: yes-please}\n", r"timeline\[0\]\.crash: write 'crash: true'"),
    ("timeline: []\nstaging: {early_start: later}\n",
     r"staging\.early_start: 'later' is not one of fallback, wait, union"),
    ("timeline: []\nstaging: {retries: -1}\n", r"staging\.retries: must be >= 0"),
    ("timeline: []\nallocation: {ratio: 0}\n", r"allocation\.ratio: must be >= 1"),
    ("timeline: []\ndurations: {stage-in: fast}\n", r"durations\.stage-in: invalid duration"),
    ("timeline: []\ndurations: {tell-user: 1s}\n", r"durations\.tell-user: unknown key"),
    ("timeline: []\nexpect: {jobs: {10: {rsa_state: happy}}}\n",
     r"expect\.jobs\.10\.rsa_state: 'happy' is not one of none, allocated"),
    ("timeline: []\nexpect: {jobs: {12: {}}}\n", r"expect\.jobs\.12: job 12 is not defined"),
    ("timeline: []\nexpect: {pool: {free: 'rsa[1-'}}\n",
     r"expect\.pool\.free: invalid hostlist"),
    ("timeline: [\n", r"test\.yaml:\d+: invalid YAML"),
])
def test_format_errors(body: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(make_scenario(body), source="test.yaml")


def timeline_at(at: str) -> str:
    return TIMELINE.replace("{at: 10m,", f"{{at: {at},")


@pytest.mark.parametrize(("body", "line", "key", "reason"), [
    # NaN was a traceback from format_duration; infinity and huge times were exit 70
    # ("no end after 1000000 steps"), i.e. reported as a core bug.
    (timeline_at(".nan"), 10, "timeline[1].at", "invalid duration nan: not a number"),
    (timeline_at(".inf"), 10, "timeline[1].at", "invalid duration inf: must be finite"),
    (timeline_at("99999999999999999999999999d"), 10, "timeline[1].at",
     "must be at most 3650d (10 years)"),
    (timeline_at("-5"), 10, "timeline[1].at", "must not be negative"),
    (timeline_at("yes"), 10, "timeline[1].at", "got a boolean"),
    (timeline_at("'" + "9" * 400 + "-00'"), 10, "timeline[1].at", "must be at most 3650d"),
    ("poll: .nan\n" + TIMELINE, 8, "poll", "invalid duration nan: not a number"),
    ("until: .inf\n" + TIMELINE, 8, "until", "must be finite"),
    ("staging: {backoff: .nan}\n" + TIMELINE, 8, "staging.backoff", "not a number"),
    ("staging: {wait_timeout: 366d}\n" + TIMELINE, 8, "staging.wait_timeout",
     "must be at most 365d (1 year)"),
    ("durations: {stage-in: .nan}\n" + TIMELINE, 8, "durations.stage-in", "not a number"),
    # the default poll (5s) over 300 days: more polls than the engine's step budget
    (timeline_at("300d"), 8, "timeline", "at poll 5s (the default) that is up to 5184060 polls"),
    ("poll: 1s\n" + timeline_at("20d"), 8, "poll", "up to 1728300 polls"),
    # the daemon polls while an action runs: a long one after the timeline counts too
    ("poll: 1s\ndurations: {stage-out: 20d}\n" + TIMELINE, 8, "poll", "up to 1731600 polls"),
    ("staging: {retries: 99999999999}\n" + TIMELINE, 8, "staging.retries", "must be <= 100"),
    ("allocation: {ratio: 99999999999999999999}\n" + TIMELINE, 8, "allocation.ratio",
     "must be <= 100000"),
])
def test_bad_numbers_are_format_errors(
    tmp_path: Path, body: str, line: int, key: str, reason: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(make_scenario(body))
    result = cli_runner().invoke(sim, [str(path)])
    assert result.exit_code == 65, result.output
    prefix = f"rsa sim: {path}:{line}: {key}: "
    assert result.output.startswith(prefix) and reason in result.output, result.output
    assert len(result.output.splitlines()) == 1


def test_action_duration_nan_is_a_format_error() -> None:
    body = "    actions: {stage-in: {duration: .nan}}\n" + TIMELINE
    with pytest.raises(ScenarioError, match=r"jobs\.10\.actions\.stage-in\.duration: "
                                            r"invalid duration nan: not a number"):
        parse_scenario(make_scenario(body), source="test.yaml")


def test_long_timelines_run_with_a_long_poll_or_none() -> None:
    for poll in ("off", "1h"):
        sc = parse_scenario(make_scenario(f"poll: {poll}\n" + timeline_at("300d")))
        assert simulate(sc).passed


def test_poll_budget_stays_below_the_engine_step_limit() -> None:
    assert scenario.MAX_POLLS <= 0.9 * engine.MAX_STEPS


def test_empty_jobs_mapping_says_it_must_not_be_empty() -> None:
    text = "pool:\n  - names: rsa1\njobs: {}\ntimeline: []\n"
    with pytest.raises(ScenarioError, match=r"^s\.yaml:3: jobs: must not be empty"):
        parse_scenario(text, source="s.yaml")


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "the file is empty; a scenario needs pool, jobs and timeline"),
    (b"\xff\xfepool: []\n", "cannot read scenario: not UTF-8 text (invalid start byte)"),
    (b"pool: " + b"[" * 5000 + b"]" * 5000 + b"\n", "invalid YAML: nested too deeply"),
    (b"pool: !foo []\n", "invalid YAML: could not determine a constructor for the tag '!foo'"),
    (b"pool:\n  - names: rsa[1-99999999999]\njobs: {1: {}}\ntimeline: []\n",
     "pool[0].names: range 1-99999999999 is too large"),
])
def test_unusable_files_are_format_errors(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    result = cli_runner().invoke(sim, [str(path)])
    assert result.exit_code == 65, result.output
    assert result.output.startswith(f"rsa sim: {path}") and reason in result.output


def test_error_names_the_line() -> None:
    text = make_scenario("timeline:\n  - {at: 0, job: 10, state: RUNING}\n")
    line = text.splitlines().index("  - {at: 0, job: 10, state: RUNING}") + 1
    with pytest.raises(ScenarioError, match=rf"^s\.yaml:{line}: timeline\[0\]\.state"):
        parse_scenario(text, source="s.yaml")


@pytest.mark.parametrize(("directives", "message"), [
    ("{data_in: relative/path}", r"jobs\.10\.directives\.data_in: RSA_DATA_IN"),
    ("{datain: /x}", r"jobs\.10\.directives\.datain: unknown directive RSA_DATAIN; "
                     r"did you mean RSA_DATA_IN\?"),
    ("\"#RSA_DATA_IN /x\\n#RSA_EARLY_START=never\\n\"",
     r"jobs\.10\.directives: line 2: RSA_EARLY_START"),
    ("42", r"jobs\.10\.directives: expected a script snippet or a mapping"),
])
def test_directive_errors_come_from_the_real_parser(directives: str, message: str) -> None:
    text = make_scenario(TIMELINE).replace(
        "{data_in: /scratch/a/in, data_out: /scratch/a/out}", directives)
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(text)


def test_directives_as_script_and_mapping_agree() -> None:
    script = make_scenario(TIMELINE).replace(
        "{data_in: /scratch/a/in, data_out: /scratch/a/out}",
        '"#!/bin/bash\\n#RSA_DATA_IN /scratch/a/in\\n#RSA_DATA_OUT=/scratch/a/out\\n"')
    a = parse_scenario(script).jobs["10"].spec
    b = parse_scenario(make_scenario(TIMELINE)).jobs["10"].spec
    assert a == b and a is not None


def test_job_without_directives_is_not_tracked() -> None:
    text = make_scenario(TIMELINE).replace(
        "    directives: {data_in: /scratch/a/in, data_out: /scratch/a/out}\n", "")
    result = simulate(parse_scenario(text))
    assert not result.jobs["10"].tracked and result.jobs["10"].rows == []


# ---- random scenarios -----------------------------------------------------------------------

def make_random_scenario(seed: int) -> str:
    """A random but valid scenario: jobs, outcomes, observations, drains, commands, crashes;
    ends with every job completed and operator retry/discard/force-release for each."""
    import random

    import yaml

    rng = random.Random(seed)
    kinds = ["build-fs", "stage-in", "lock-in", "mount-input", "mount-output", "write-back",
             "reset", "stage-out", "verify", "destroy-fs"]
    states = [("PENDING", "Resources")] * 4 + [
        ("PENDING", "Priority"), ("PENDING", "BeginTime"), ("RUNNING", "None"),
        ("RUNNING", "None"), ("COMPLETED", "None"), ("CANCELLED", "None"), ("GONE", "")]
    jobs: dict[str, dict[str, object]] = {}
    for j in range(rng.randint(1, 4)):
        d: dict[str, str] = {}
        if rng.random() < 0.8:
            d["data_in"] = f"/scratch/u/in{j}"
        if rng.random() < 0.8 or not d:
            d["data_out"] = f"/scratch/u/out{j}"
        if "data_in" in d and rng.random() < 0.3:
            d["early_start"] = rng.choice(["fallback", "wait", "union"])
        if "data_in" in d and rng.random() < 0.2:
            d["input"] = "rw"
        acts = {}
        for k in kinds:
            if rng.random() < 0.25:
                res = rng.choice(["ok", "failed", "failed", "refused"]
                                 + (["busy", "busy"] if k == "reset" else []))
                acts[k] = [{"result": res, "times": rng.randint(1, 4),
                            "duration": rng.randint(0, 600)}]
        jobs[str(100 + j)] = {"nodes": rng.randint(1, 8), "priority": rng.randint(0, 100),
                              "directives": d, "actions": acts}
    timeline: list[dict[str, object]] = []
    t = 0
    for _ in range(rng.randint(3, 14)):
        t += rng.choice([0, 5, 30, 60, 120, 300, 900])
        x = rng.random()
        if x < 0.75:
            state, reason = rng.choice(states)
            e: dict[str, object] = {"at": t, "job": rng.choice(list(jobs)), "state": state}
            if state == "PENDING":
                e["reason"] = reason
            timeline.append(e)
        elif x < 0.83:
            timeline.append({"at": t, "crash": True})
        elif x < 0.9:
            timeline.append({"at": t, "node": f"rsa{rng.randint(1, 4)}",
                             "set": rng.choice(["drained", "up", "down"])})
        else:
            timeline.append({"at": t, "job": rng.choice(list(jobs)), "command": rng.choice(
                ["input-done", "cancel-staging", "retry", "discard", "force-release"])})
    for step, entry in ((600, {"state": "COMPLETED"}), (36000, {"command": "retry"}),
                        (36000, {"command": "discard"}), (36000, {"command": "force-release"})):
        t += step
        timeline += [{"at": t, "job": j, **entry} for j in jobs]
    return yaml.safe_dump({"pool": [{"names": "rsa[1-4]"}],
                           "allocation": {"ratio": 2, "max_nodes": 3},
                           "staging": {"backoff": "30s", "retries": 2}, "poll": "1m",
                           "jobs": jobs, "timeline": timeline})


@pytest.mark.parametrize("seed", range(40))
def test_random_scenarios_keep_every_invariant(seed: int) -> None:
    """No double booking, no leak, replay == live after every step and across crashes,
    and once operators have retried/discarded/force-released, every job's cycle ended."""
    result = simulate(parse_scenario(make_random_scenario(seed), f"random{seed}"),
                      replay_every_step=True)
    for jid, job in result.jobs.items():
        if job.tracked:
            assert job.final["rsa_state"] in TERMINAL, (jid, job.final)
    assert result.pool["held"] == {}


# ---- one validator: a scenario's settings as rsad's configuration checks them ---------------

@pytest.mark.parametrize("allocation", [
    "{ratio: 0}",
    "{max_request: 100001}",
    "{price: {ram: -1}}",
    "{price: {nvme: 1}}",
    "{bandwidth: {ssd: 0}}",
    "{io_time: 2d}",
    "{io_time: 0s}",
    "{min_nodes: 4, max_nodes: 2}",
    "{ratio: 2, colour: blue}",
])
def test_a_scenarios_allocation_is_checked_as_rsads_configuration_is(allocation: str) -> None:
    """The scenario's ``allocation:`` is rsad's section, converted by the same validator:
    the same value is refused with the same key and reason in both."""
    from rsa_scheduler.config import ConfigErrors, load_config_text

    with pytest.raises(ConfigErrors) as cfg_error:
        load_config_text("pool:\n  nodes:\n    - {names: 'rsa[1-8]', capacity: 1G}\n"
                         f"allocation: {allocation}\n")
    issue = cfg_error.value.issues[0]
    with pytest.raises(ScenarioError) as sim_error:
        parse_scenario(make_scenario(f"allocation: {allocation}\n" + TIMELINE),
                       source="s.yaml")
    assert str(sim_error.value) == f"s.yaml:8: {issue.key}: {issue.reason}"


def test_scenario_values_get_the_configurations_checks() -> None:
    """Hostlists and durations of a scenario go through the configuration's validator
    too (node groups, node names), in the scenario's words where its format differs."""
    with pytest.raises(ScenarioError, match=r"^s\.yaml:2: pool\[0\]\.names: node groups "
                                            r"\(@group\) are not supported; list the nodes$"):
        parse_scenario("pool:\n  - names: '@rsa'\njobs: {1: {}}\ntimeline: []\n",
                       source="s.yaml")
    with pytest.raises(ScenarioError, match=r"^s\.yaml:2: pool\[0\]\.names: invalid node "
                                            r"name 'rsa-' in 'rsa-'$"):
        parse_scenario("pool:\n  - names: 'rsa-'\njobs: {1: {}}\ntimeline: []\n",
                       source="s.yaml")
    # a bare number is seconds in a scenario (ambiguous in rsad's configuration)
    sc = parse_scenario(make_scenario("staging: {backoff: 45, reset: {delay: 90}}\n"
                                      + TIMELINE))
    assert (sc.staging.backoff, sc.staging.reset_delay) == (45.0, 90.0)
    with pytest.raises(ScenarioError, match=r"staging\.reset\.trigger: 'soon' is not one "
                                            r"of delay, input-done$"):
        parse_scenario(make_scenario("staging: {reset: {trigger: soon}}\n" + TIMELINE))
    with pytest.raises(ScenarioError, match=r"^s\.yaml:8: staging: backoff must be > 0 and "
                                            r"<= backoff_max$"):
        parse_scenario(make_scenario("staging: {backoff: 1h, backoff_max: 1m}\n" + TIMELINE),
                       source="s.yaml")
