"""rsad's start-up check of the lock-in method against ``scontrol show config``, on output
captured from the lab's real Slurm 22.05 (accounting on and off) and from 24.11 and 26.05
(tests/data/slurm/24.11, 26.05)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rsa_scheduler.config import LockinMethod, load_defaults
from rsa_scheduler.slurm.cli import (
    BASIC_TOP_PRIORITY,
    MAX_PRIORITY,
    CliSlurm,
    guard_warning,
    lockin_problem,
    multifactor_top,
    parse_show_config,
    qos_warning,
    show_config_argv,
)

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent.parent / "data" / "slurm"
NOACCT = (DATA / "scontrol_show_config_noacct.txt").read_text()
ACCT = (DATA / "scontrol_show_config.txt").read_text()
#: every captured ``scontrol show config``: 22.05 stock (priority/basic, no accounting,
#: as Debian 12's slurm.conf leaves it) and with slurmdbd (priority/multifactor), the same
#: on 24.11 and 26.05
CAPTURES = sorted(DATA.glob("**/scontrol_show_config*.txt"))


def _with(text: str, key: str, value: str) -> dict[str, str]:
    """The captured config with one key changed, as Slurm would print it."""
    changed = re.sub(rf"^{key}\s*=.*$", f"{key} = {value}", text, count=1, flags=re.M)
    assert changed != text or f"{key} = {value}" in text, key
    return parse_show_config(changed)


def test_argv() -> None:
    assert show_config_argv(Path("/opt/slurm/bin")) == ["/opt/slurm/bin/scontrol", "show",
                                                        "config"]


def test_parse_the_captured_configs() -> None:
    off, on = parse_show_config(NOACCT), parse_show_config(ACCT)
    assert off["AccountingStorageType"] == "accounting_storage/none"
    assert off["PriorityType"] == "priority/basic"
    assert off["AccountingStorageEnforce"] == "none"
    assert on["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert on["PriorityType"] == "priority/multifactor"
    assert on["PriorityWeightQOS"] == "100000"
    assert set(on["AccountingStorageEnforce"].split(",")) >= {"associations", "limits", "qos"}
    # values keep inner spaces and '=' signs; the header and the status line are no keys
    assert off["SchedulerParameters"] == "bf_interval=5,sched_interval=5,bf_resolution=60"
    assert off["MinJobAge"] == "600 sec"
    assert not any(k.startswith(("Configuration", "Slurmctld(")) for k in off)


def test_qos_without_accounting_is_refused_in_one_actionable_line() -> None:
    problem = lockin_problem("qos", 1_000_000, parse_show_config(NOACCT))
    assert problem == (
        "slurm.lockin.method is qos but Slurm has no accounting "
        "(AccountingStorageType=accounting_storage/none), so it accepts qos= and ignores "
        "it: set slurm.lockin.method: priority, or enable slurmdbd")
    assert "\n" not in problem


def test_qos_with_accounting_is_accepted() -> None:
    config = parse_show_config(ACCT)
    assert lockin_problem("qos", 1_000_000, config) is None
    assert qos_warning("qos", "rsa-lockin", config) is None


def test_qos_is_refused_when_the_priority_plugin_ignores_it() -> None:
    basic = _with(ACCT, "PriorityType", "priority/basic")
    assert "PriorityType=priority/basic ignores" in (lockin_problem("qos", 1, basic) or "")
    no_weight = _with(ACCT, "PriorityWeightQOS", "0")
    assert "PriorityWeightQOS=0" in (lockin_problem("qos", 1, no_weight) or "")


def test_qos_not_enforced_is_a_warning_not_a_refusal() -> None:
    loose = _with(ACCT, "AccountingStorageEnforce", "associations,limits")
    assert lockin_problem("qos", 1, loose) is None
    warning = qos_warning("qos", "rsa-lockin", loose)
    assert warning and "--qos=rsa-lockin" in warning
    assert qos_warning("priority", "rsa-lockin", loose) is None


def test_priority_under_priority_basic_must_beat_ordinary_jobs() -> None:
    config = parse_show_config(NOACCT)
    # 1000000 (the default before issue 39) would be a demotion: basic counts down from
    # 0xffff0000
    problem = lockin_problem("priority", 1_000_000, config)
    assert problem and f"between {BASIC_TOP_PRIORITY} and {MAX_PRIORITY}" in problem
    assert lockin_problem("priority", BASIC_TOP_PRIORITY, config) is None
    assert lockin_problem("priority", MAX_PRIORITY, config) is None
    assert lockin_problem("priority", MAX_PRIORITY + 1, config) is not None
    # with multifactor, ordinary priorities are at most the weights' sum (the lab's 101000)
    assert lockin_problem("priority", 1_000_000, parse_show_config(ACCT)) is None


def test_priority_under_multifactor_must_beat_the_weights_sum() -> None:
    """Method priority is what a site that bills or limits by QOS runs with accounting,
    i.e. priority/multifactor: a lock-in priority a job can reach by its weights is no
    lock-in (an old job with a high fair share overtakes it)."""
    config = parse_show_config(ACCT)
    assert multifactor_top(config) == 100_000 + 1000  # QOS + Age, the lab's weights
    problem = lockin_problem("priority", 101_000, config)
    assert problem == (
        "slurm.lockin.priority 101000 is not above what PriorityType=priority/multifactor "
        "can give ordinary jobs (up to 101000, the sum of the PriorityWeight* settings): "
        f"set it above 101000 (at most {MAX_PRIORITY}), and job_submit.lua's "
        "lockin_priority to the same value")
    assert lockin_problem("priority", 101_001, config) is None
    # the weights of the whole config count, each TRES weight whole (a unit only lowers it)
    big = _with(ACCT, "PriorityWeightFairShare", "2000000")
    assert "up to 2101000" in (lockin_problem("priority", 1_000_000, big) or "")
    tres = _with(ACCT, "PriorityWeightTRES", "CPU=1000,Mem=0.25G,GRES/gpu=3000")
    assert multifactor_top(tres) == 101_000 + 1000 + 1 + 3000
    # method qos does not care; basic has its own bound
    assert lockin_problem("qos", 1, big) is None


def test_multifactor_without_a_bound_is_not_refused() -> None:
    """A site factor plugin or raw (not normalised) factors can give any priority: rsad
    cannot tell, so it does not refuse (the operator's call, docs/operator-guide.md)."""
    for key, value in (("PrioritySiteFactorPlugin", "site_factor/example"),
                       ("PriorityFlags", "NO_NORMAL_QOS"),
                       ("PriorityFlags", "MAX_TRES,NO_NORMAL_ALL"),
                       ("PriorityWeightTRES", "CPU=lots")):
        config = _with(ACCT, key, value)
        assert multifactor_top(config) is None, (key, value)
        assert lockin_problem("priority", 1, config) is None
    assert multifactor_top(_with(ACCT, "PriorityFlags", "MAX_TRES")) == 101_000


def test_none_and_unknown_output_pass() -> None:
    assert lockin_problem("none", 1, parse_show_config(NOACCT)) is None
    assert lockin_problem("qos", 1, {}) is None


def test_the_default_lockin_is_by_priority_and_keeps_the_jobs_own_qos() -> None:
    """Issue 39: a job's own QOS must be its own when it runs; Slurm changes no running
    job's QOS, so only method priority gives that (docs/operator-guide.md)."""
    lockin = load_defaults().slurm.lockin
    assert lockin.method is LockinMethod.PRIORITY
    assert (CliSlurm().lockin_method, CliSlurm().lockin_priority) == (
        lockin.method.value, lockin.priority)


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: str(p.relative_to(DATA)))
def test_the_default_lockin_passes_rsads_start_up_check_on_every_captured_slurm(
        capture: Path) -> None:
    """rsad starts with its defaults on a stock Slurm: priority/basic (22.05's default,
    ordinary jobs up to 0xffff0000 - 1) and priority/multifactor, 22.05 to 26.05."""
    lockin = load_defaults().slurm.lockin
    config = parse_show_config(capture.read_text())
    assert config["PriorityType"] in ("priority/basic", "priority/multifactor")
    assert lockin_problem(lockin.method.value, lockin.priority, config) is None
    assert guard_warning(lockin.method.value, lockin.priority, config) is None
    assert BASIC_TOP_PRIORITY <= lockin.priority <= MAX_PRIORITY


@pytest.mark.parametrize("weights", [
    # Slurm's documentation's example (slurm.conf, "PriorityWeight*")
    {"PriorityWeightAge": "1000", "PriorityWeightFairShare": "10000",
     "PriorityWeightJobSize": "1000", "PriorityWeightPartition": "1000",
     "PriorityWeightQOS": "0"},
    # a site weighing everything heavily, TRES included
    {"PriorityWeightAge": "100000", "PriorityWeightAssoc": "100000",
     "PriorityWeightFairShare": "10000000", "PriorityWeightJobSize": "100000",
     "PriorityWeightPartition": "1000000", "PriorityWeightQOS": "1000000",
     "PriorityWeightTRES": "CPU=1000,Mem=2000,GRES/gpu=100000"},
])
def test_the_default_lock_in_priority_is_above_typical_multifactor_weights(
        weights: dict[str, str]) -> None:
    text = ACCT
    for key, value in weights.items():
        text = re.sub(rf"^{key}\s*=.*$", f"{key} = {value}", text, count=1, flags=re.M)
    config = parse_show_config(text)
    top = multifactor_top(config)
    assert top is not None and top == sum(float(v) for k, v in weights.items()
                                          if k != "PriorityWeightTRES") + sum(
        float(w.split("=")[1]) for w in weights.get("PriorityWeightTRES", "").split(",") if w)
    priority = load_defaults().slurm.lockin.priority
    assert priority > top
    assert lockin_problem("priority", priority, config) is None


def test_a_priority_lock_in_without_job_submit_lua_is_a_warning() -> None:
    """Without job_submit.lua's guard a user may lower a locked-in job's priority by one
    (Slurm lets users lower their jobs' priority) and keep it above everyone's."""
    for plugins in ("(null)", "pbs", "require_timelimit"):
        config = _with(NOACCT, "JobSubmitPlugins", plugins)
        assert lockin_problem("priority", 4_294_967_000, config) is None
        warning = guard_warning("priority", 4_294_967_000, config)
        assert warning == (
            f"JobSubmitPlugins={plugins} has no lua: without job_submit.lua's lock-in "
            "guard a user can lower a locked-in job's priority to just below 4294967000 "
            "and keep it above every other job's: install slurm_plugins/job_submit.lua "
            "with lockin_priority = 4294967000 (docs/job_submit.md)"), plugins
        assert guard_warning("qos", 4_294_967_000, config) is None
    for plugins in ("lua", "pbs,lua", "job_submit/lua"):
        assert guard_warning("priority", 1, _with(NOACCT, "JobSubmitPlugins", plugins)) is None
    assert guard_warning("priority", 1, {}) is None  # the output does not say
