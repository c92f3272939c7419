"""Configuration: loading, merging, every validation error, the generated reference, the CLI."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rsa_scheduler.cli.main import cli
from rsa_scheduler.config import (
    DEFAULTS_PATH,
    Config,
    ConfigErrors,
    ConfigIssue,
    HostPort,
    LockinMethod,
    config_from_mapping,
    defaults_text,
    load_config,
    load_config_text,
    load_defaults,
    loader,
    resolve_config_path,
)
from rsa_scheduler.config.reference import BEGIN, END, extract, generate_reference, splice
from rsa_scheduler.config.schema import (
    BeeondStorage,
    Duration,
    Int,
    ListOf,
    Section,
    format_duration_short,
    format_size_exact,
    settings_of,
)
from rsa_scheduler.core.policy import AllocationPolicy, EarlyStart, Tier
from rsa_scheduler.core.units import MAX_DURATION, parse_duration, parse_size
from rsa_scheduler.errors import ConfigError, RsaError
from tests.clirunner import cli_runner
from tests.conftest import DATA, hook_wrapper

CONFIGS = DATA / "config"
LAB = CONFIGS / "lab.yaml"
REPO = Path(__file__).resolve().parents[2]
G = 1 << 30

# A valid site file the error cases extend.
POOL = """
pool:
  nodes:
    - names: "rsa[1-4]"
      capacity: 2G
"""


def issues_of(text: str, *, file: str = "site.yaml") -> list[ConfigIssue]:
    with pytest.raises(ConfigErrors) as e:
        load_config_text(text, file=file)
    return list(e.value.issues)


def one_issue(text: str) -> ConfigIssue:
    found = issues_of(text)
    assert len(found) == 1, [str(i) for i in found]
    return found[0]


# --------------------------------------------------------------------------- loading


def test_defaults_alone_load_with_an_empty_pool() -> None:
    cfg = load_defaults()
    assert cfg.pool.nodes == ()
    assert cfg.daemon.state_dir == Path("/var/lib/rsa")
    assert cfg.daemon.db_path == Path("/var/lib/rsa/rsa.db")
    assert cfg.daemon.poll_interval == 5.0
    assert cfg.daemon.api.listen is None
    assert cfg.slurm.lockin.method is LockinMethod.PRIORITY
    assert cfg.allocation == AllocationPolicy()
    assert cfg.filesystem.backend == {Tier.RAM: "moosefs", Tier.SSD: "moosefs"}
    assert cfg.ssh.command_timeout == 300.0
    assert cfg.staging.early_start is EarlyStart.WAIT
    assert cfg.staging.allowed_roots == (Path("/home"), Path("/scratch"), Path("/work"))
    assert cfg.staging.reset.delay == 600.0
    assert (cfg.health.ramdisk_interval, cfg.health.ramdisk_stall) == (15.0, 120.0)
    assert cfg.metrics.listen is None
    assert cfg.warnings == ()


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """The lab config copied with mode 0644: the checkout's umask (002 makes it
    group-writable) must not add a permissions warning to what the tests compare."""
    path = tmp_path / "lab.yaml"
    path.write_bytes(LAB.read_bytes())
    path.chmod(0o644)
    return path


def test_lab_file_is_merged_over_the_defaults(lab: Path) -> None:
    cfg = load_config(lab, env={})
    assert cfg.source == lab
    assert isinstance(cfg.allocation, AllocationPolicy)
    assert cfg.allocation == AllocationPolicy(ratio=1, min_nodes=1, max_nodes=4, max_request=4)
    nodes = cfg.pool.members()
    assert [n.name for n in nodes] == ["rsa1", "rsa2", "rsa3", "rsa4", "rsa-ssd1", "rsa-ssd2"]
    assert [n.address for n in nodes[:4]] == [f"127.0.1.{i}" for i in range(1, 5)]
    ram, ssd = nodes[0], nodes[4]
    assert (ram.tier, ram.capacity, ram.ssh_port, ram.pool_dir) == (
        Tier.RAM,
        2 * G,
        22,
        Path("/var/lib/rsa-ram"),
    )
    assert (ssd.tier, ssd.capacity, ssd.ssh_port, ssd.pool_dir) == (
        Tier.SSD,
        int(3.5 * 1024 * G),
        2222,
        Path("/var/lib/rsa-lab/ssd"),
    )
    assert {t: len(n) for t, n in cfg.pool.by_tier().items()} == {Tier.RAM: 4, Tier.SSD: 2}
    # set in the file
    assert cfg.daemon.state_dir == Path("/var/lib/rsa-lab")
    assert cfg.daemon.api.listen == HostPort("127.0.0.1", 7820)
    assert cfg.slurm.lockin.method is LockinMethod.PRIORITY
    # merged from the defaults, beside keys the file set in the same section
    assert cfg.daemon.api.socket == Path("/run/rsa/rsad.sock")
    assert cfg.daemon.workers == 8
    assert cfg.slurm.lockin.qos == "rsa-lockin"
    # a list replaces the default list
    assert cfg.staging.allowed_roots == (Path("/pfs"), Path("/home"))
    assert cfg.warnings == ()


def test_config_is_frozen() -> None:
    cfg = load_defaults()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.daemon.workers = 2  # type: ignore[misc]


def test_path_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"RSA_CONFIG": "/from/env.yaml"}
    assert resolve_config_path("/given.yaml", env=env) == Path("/given.yaml")
    assert resolve_config_path(None, env=env) == Path("/from/env.yaml")
    assert resolve_config_path(None, env={"RSA_CONFIG": ""}) == Path("/etc/rsa/rsa.yaml")
    assert resolve_config_path(None, env={}) == Path("/etc/rsa/rsa.yaml")
    assert load_config(None, env={"RSA_CONFIG": str(LAB)}).source == LAB


def test_missing_default_file_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "rsa.yaml"
    monkeypatch.setattr(loader, "DEFAULT_CONFIG_PATH", missing)
    with pytest.raises(ConfigErrors) as e:
        load_config(env={})
    msg = str(e.value)
    assert msg.startswith(f"{missing}: no such file; create ")
    assert "--config" in msg and "RSA_CONFIG" in msg and "rsa config show --defaults" in msg


def test_missing_explicit_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigErrors, match=r"nope\.yaml: no such file$"):
        load_config(missing, env={})
    with pytest.raises(ConfigErrors, match=r"no such file \(from \$RSA_CONFIG\)"):
        load_config(env={"RSA_CONFIG": str(missing)})


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigErrors) as e:
        load_config(tmp_path, env={})
    assert e.value.file == str(tmp_path)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"daemon:\n  log_level: \xe9\n")
    with pytest.raises(ConfigErrors, match="not UTF-8"):
        load_config(latin, env={})


def test_errors_are_config_errors_naming_file_key_reason() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(CONFIGS / "bad-values.yaml", env={})
    err = e.value
    assert isinstance(err, RsaError)
    assert err.file == str(CONFIGS / "bad-values.yaml")
    assert err.key == "daemon.workrs"
    assert "did you mean 'workers'" in err.reason


def test_yaml_syntax_error_names_file_and_line() -> None:
    path = CONFIGS / "bad-syntax.yaml"
    with pytest.raises(ConfigErrors) as e:
        load_config(path, env={})
    (issue,) = e.value.issues
    assert (issue.file, issue.line, issue.key) == (str(path), 3, "")
    assert str(issue).startswith(f"{path}:3: invalid YAML: ")


def test_every_problem_is_reported_at_once() -> None:
    path = CONFIGS / "bad-values.yaml"
    with pytest.raises(ConfigErrors) as e:
        load_config(path, env={})
    got = {(i.key, i.line) for i in e.value.issues}
    assert got == {
        ("daemon.workrs", 2),
        ("daemon.poll_interval", 3),
        ("daemon.log_level", 4),
        ("daemon.api.listen", 6),
        ("slurm.bin_dir", 8),
        ("slurm.lockin.method", 10),
        ("pool.nodes[0].names", 13),
        ("pool.nodes[1].capacity", 16),
        ("pool.nodes[2].capacity", 17),
        ("filesystem.backend.ram", 20),
        ("staging.allowed_roots[0]", 22),
    }
    assert all(i.file == str(path) for i in e.value.issues)
    lines = str(e.value).splitlines()
    assert lines[0] == "11 errors in the configuration:"
    assert lines[1] == f"  {path}:2: daemon.workrs: unknown key; did you mean 'workers'?"


def test_cross_field_errors_are_all_reported() -> None:
    path = CONFIGS / "bad-cross.yaml"
    with pytest.raises(ConfigErrors) as e:
        load_config(path, env={})
    got = {(i.key, i.line) for i in e.value.issues}
    assert got == {
        ("allocation.max_nodes", 3),
        ("pool.nodes[1].names", 9),
        ("pool.nodes[1].address", 11),
        ("staging.backoff_max", 14),
        ("hooks.api_timeout", 17),
    }


def test_site_file_needs_rsa_nodes() -> None:
    with pytest.raises(ConfigErrors) as e:
        load_config(CONFIGS / "empty-pool.yaml", env={})
    (issue,) = e.value.issues
    assert issue.key == "pool.nodes"
    assert "no RSA nodes defined" in issue.reason
    assert "shipped default" not in issue.reason
    # an empty file is the same
    assert one_issue("").key == "pool.nodes"
    # tools may load a site file without nodes explicitly
    assert load_config_text("daemon: {workers: 2}", require_pool=False).daemon.workers == 2


def test_value_from_the_defaults_is_flagged() -> None:
    issue = one_issue(POOL + "allocation:\n  min_nodes: 10\n")
    assert issue.key == "allocation.max_nodes"
    assert issue.line is None
    assert issue.reason == (
        "max_nodes must be >= min_nodes (the shipped default; override it in this file)"
    )


@pytest.mark.parametrize(
    ("snippet", "key", "reason"),
    [
        # unknown keys, with suggestions
        ("daemon:\n  workrs: 4\n", "daemon.workrs", "unknown key; did you mean 'workers'?"),
        ("deamon:\n  workers: 4\n", "deamon", "unknown section; did you mean 'daemon'?"),
        ("daemon:\n  zzz: 4\n", "daemon.zzz", "unknown key"),
        # wrong types say what was expected
        ("daemon: 5\n", "daemon", "expected a mapping, got number 5"),
        (
            "daemon:\n  workers: eight\n",
            "daemon.workers",
            "expected an integer, got string 'eight'",
        ),
        ("daemon:\n  workers: true\n", "daemon.workers", "expected an integer, got boolean true"),
        ("daemon:\n  workers: 0\n", "daemon.workers", "must be >= 1, got 0"),
        ("slurm:\n  lockin:\n    qos: ''\n", "slurm.lockin.qos", "expected a non-empty string"),
        # durations
        (
            "daemon:\n  poll_interval: 5\n",
            "daemon.poll_interval",
            "ambiguous duration 5: add a unit",
        ),
        ("daemon:\n  poll_interval: soon\n", "daemon.poll_interval", "invalid duration 'soon'"),
        ("daemon:\n  poll_interval: 0s\n", "daemon.poll_interval", "must be longer than 0s"),
        ("daemon:\n  poll_interval: [1]\n", "daemon.poll_interval", "expected a duration"),
        # sizes
        (
            'pool:\n  nodes:\n    - {names: rsa1, capacity: "2 gigs"}\n',
            "pool.nodes[0].capacity",
            "invalid size '2 gigs'",
        ),
        (
            "pool:\n  nodes:\n    - {names: rsa1, capacity: 0}\n",
            "pool.nodes[0].capacity",
            "larger than 0",
        ),
        (
            "pool:\n  nodes:\n    - {names: rsa1}\n",
            "pool.nodes[0].capacity",
            "missing required key",
        ),
        # choices
        (
            "daemon:\n  log_level: inf\n",
            "daemon.log_level",
            "got string 'inf'; did you mean 'info'?",
        ),
        ("slurm:\n  lockin:\n    method: off\n", "slurm.lockin.method", "got boolean false (YAML"),
        ("staging:\n  early_start: soon\n", "staging.early_start", "one of fallback, wait, union"),
        # paths
        (
            "slurm:\n  bin_dir: usr/bin\n",
            "slurm.bin_dir",
            "must be an absolute path, got 'usr/bin'",
        ),
        ("ssh:\n  key: /etc/../root/key\n", "ssh.key", "without '.', '..' or NUL"),
        ("filesystem:\n  mount_root: /\n", "filesystem.mount_root", "must not be / itself"),
        ("staging:\n  allowed_roots: [/home, /]\n", "staging.allowed_roots[1]", "not be / itself"),
        ("staging:\n  allowed_roots: /home\n", "staging.allowed_roots", "expected a list"),
        ("staging:\n  allowed_roots: []\n", "staging.allowed_roots", "at least one directory"),
        # listen addresses
        ("metrics:\n  listen: localhost\n", "metrics.listen", "expected host:port"),
        ("metrics:\n  listen: 127.0.0.1:70000\n", "metrics.listen", "expected host:port"),
        ("metrics:\n  listen: 9465\n", "metrics.listen", "expected host:port or empty, got number"),
        (
            "daemon:\n  api:\n    listen: 0.0.0.0:9\nmetrics:\n  listen: 0.0.0.0:9\n",
            "metrics.listen",
            "same address as daemon.api.listen (0.0.0.0:9)",
        ),
        # filesystem backends
        (
            "filesystem:\n  backend:\n    ram: mosefs\n",
            "filesystem.backend.ram",
            "did you mean 'moosefs'?",
        ),
        (
            "filesystem:\n  backend:\n    ssdd: tmpfs\n",
            "filesystem.backend.ssdd",
            "did you mean 'ssd'?",
        ),
        (
            "filesystem:\n  backend:\n    ram: tmpfs\n",
            "filesystem.backend.ram",
            "tmpfs serves a single",
        ),
        # timings
        (
            "staging:\n  backoff: 5m\n  backoff_max: 1m\n",
            "staging.backoff_max",
            ">= staging.backoff",
        ),
        (
            "hooks:\n  timeout: 1s\n  api_timeout: 2s\n",
            "hooks.api_timeout",
            "not exceed hooks.timeout",
        ),
        # allocation
        ("allocation:\n  ratio: 0\n", "allocation.ratio", "must be >= 1, got 0"),
        (
            "allocation:\n  min_nodes: 3\n  max_nodes: 2\n",
            "allocation.max_nodes",
            "max_nodes must be >= min",
        ),
        ("allocation:\n  default_tier: ssd\n", "allocation.default_tier", "tier ssd has no nodes"),
        ("allocation:\n  default_tier: nvme\n", "allocation.default_tier", "one of ram, ssd"),
        (
            "allocation:\n  min_nodes: 5\n",
            "allocation.min_nodes",
            "needs 5 nodes but tier ram has only 4",
        ),
        # pool structure
        ("pool: []\n", "pool", "expected a mapping, got a list"),
        ("pool:\n  nodes: rsa1\n", "pool.nodes", "expected a list, got string 'rsa1'"),
        ("pool:\n  nodes: [rsa1]\n", "pool.nodes[0]", "expected a mapping, got string 'rsa1'"),
        ("pool:\n  nodes: []\n", "pool.nodes", "no RSA nodes defined"),
        # a pool or RAMDISK mounts where every user can write (docs/security.md,
        # "Leftovers on RSA nodes")
        ("pool:\n  nodes:\n    - {names: rsa1, capacity: 1G, pool_dir: /dev/shm/rsa}\n",
         "pool.nodes[0].pool_dir", "/dev/shm/rsa is on /dev/shm, which every user can fill"),
        ("pool:\n  nodes:\n    - {names: rsa1, capacity: 1G, pool_dir: /var/tmp}\n",
         "pool.nodes[0].pool_dir", "give the pool a filesystem of its own"),
        ("filesystem:\n  mount_root: /tmp/rsa\n", "filesystem.mount_root",
         "would not see the RAMDISKs there"),
        ("staging:\n  allowed_roots: [/home, /dev/shm/x]\n", "staging.allowed_roots",
         "/dev/shm/x is on /dev/shm: staging commands on RSA nodes have a private"),
        ("staging:\n  private_tmp: 4K\n", "staging.private_tmp", "at least 1M"),
    ],
)
def test_error(snippet: str, key: str, reason: str) -> None:
    # Later keys replace POOL's when the snippet sets pool itself.
    text = snippet if snippet.startswith("pool") else POOL + snippet
    issue = one_issue(text)
    assert issue.file == "site.yaml"
    assert issue.key == key
    assert reason in issue.reason
    assert str(issue).startswith(f"site.yaml:{issue.line}: {key}: " if issue.line else "site.yaml")


@pytest.mark.parametrize(
    ("entries", "key", "reason"),
    [
        ('- {names: "rsa[1-4", capacity: 1G}', "pool.nodes[0].names", "invalid hostlist 'rsa[1-4'"),
        ('- {names: "rsa[4-1]", capacity: 1G}', "pool.nodes[0].names", "invalid hostlist"),
        ('- {names: "@rsa", capacity: 1G}', "pool.nodes[0].names", "node groups (@group)"),
        ('- {names: "a b", capacity: 1G}', "pool.nodes[0].names", "invalid node name 'a b'"),
        ('- {names: "", capacity: 1G}', "pool.nodes[0].names", "expected a hostlist"),
        ("- {names: 7, capacity: 1G}", "pool.nodes[0].names", "got number 7"),
        (
            '- {names: "rsa[1-4]", capacity: 1G}\n    - {names: "rsa[3-5]", capacity: 1G}',
            "pool.nodes[1].names",
            "node rsa3 is already defined in pool.nodes[0]",
        ),
        (
            '- {names: "rsa[1-2]", capacity: 1G, address: 10.0.0.1}',
            "pool.nodes[0].address",
            "a fixed address cannot serve 2 nodes",
        ),
        (
            '- {names: "rsa[1-2]", capacity: 1G, address: "{nam}-ib"}',
            "pool.nodes[0].address",
            "unknown placeholder {nam} (use {name} or {num}); did you mean 'name'?",
        ),
        (
            '- {names: "rsa[a,b]", capacity: 1G, address: "10.0.0.{num}"}',
            "pool.nodes[0].names",
            "invalid hostlist",
        ),
        (
            '- {names: "rsa,node", capacity: 1G, address: "10.0.0.{num}"}',
            "pool.nodes[0].address",
            "{num} needs a trailing number in the node name, got 'node'",
        ),
        (
            '- {names: "rsa[1-2]", capacity: 1G, address: "10.0.0.{num"}',
            "pool.nodes[0].address",
            "invalid pattern",
        ),
        (
            '- {names: "rsa[1-2]", capacity: 1G, address: "h{name} x"}',
            "pool.nodes[0].address",
            "invalid address 'hrsa1 x'",
        ),
        (
            "- {names: rsa1, capacity: 1G, address: h}\n"
            "    - {names: rsa2, capacity: 1G, address: h}",
            "pool.nodes[1].address",
            "rsa2 and rsa1 have the same address and port h:22",
        ),
        ("- {names: rsa1, capacity: 1G, ssh_port: 0}", "pool.nodes[0].ssh_port", "must be >= 1"),
        ("- {names: rsa1, capacity: 1G, tier: disk}", "pool.nodes[0].tier", "one of ram, ssd"),
        ("- {names: rsa1, capacity: 1G, tier: auto}", "pool.nodes[0].tier", "ram, ssd, got"),
        ("- {names: rsa1, capacity: 1G, pool_dir: shm}", "pool.nodes[0].pool_dir", "absolute path"),
        ("- {names: rsa1, capacity: 1G, size: 1G}", "pool.nodes[0].size", "unknown key"),
    ],
)
def test_pool_errors(entries: str, key: str, reason: str) -> None:
    issue = one_issue(f"pool:\n  nodes:\n    {entries}\n")
    assert issue.key == key
    assert reason in issue.reason
    assert issue.line is not None


def test_yaml_level_problems() -> None:
    issue = one_issue("- a\n- b\n")
    assert (issue.key, issue.line) == ("", 1)
    assert "expected a mapping of sections, got a list" in issue.reason
    issue = one_issue(POOL + "daemon:\n  workers: 2\n  workers: 3\n")
    assert (issue.key, issue.line, issue.reason) == ("daemon.workers", 8, "duplicate key")
    issue = one_issue(POOL + "daemon:\n  1: 2\n")
    assert (issue.key, issue.reason) == ("daemon", "key 1 is not a string")
    issue = one_issue(POOL + "daemon:\n  state_dir: !!python/name:os.system\n")
    assert issue.line == 7 and "invalid YAML" in issue.reason
    issue = one_issue("a: 1\n---\nb: 2\n")
    assert "invalid YAML" in issue.reason


def test_yaml_aliases_and_merge_keys_work() -> None:
    cfg = load_config_text(
        """
pool:
  nodes:
    - &ram {names: "rsa[1-2]", capacity: 2G}
    - <<: *ram
      names: "rsa[3-4]"
"""
    )
    assert [n.name for n in cfg.pool.members()] == ["rsa1", "rsa2", "rsa3", "rsa4"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5:00", 300.0),
        ("05:00", 300.0),
        ("1:00:00", 3600.0),
        ("1-00:00:00", 86400.0),
        ("250ms", 0.25),
        ("2h", 7200.0),
        ("30s", 30.0),
    ],
)
def test_durations_in_slurm_dialect(text: str, seconds: float) -> None:
    # YAML 1.1 would read 5:00 as the base-60 integer 300; it stays Slurm's MM:SS.
    cfg = load_config_text(POOL + f"staging:\n  wait_timeout: {text}\n")
    assert cfg.staging.wait_timeout == seconds


def test_zero_duration_where_allowed() -> None:
    cfg = load_config_text(POOL + "staging:\n  reset:\n    delay: 0\n")
    assert cfg.staging.reset.delay == 0.0
    cfg = load_config_text(POOL + "health:\n  ramdisk_stall: 0s\n")  # never stopped
    assert cfg.health.ramdisk_stall == 0.0


@pytest.mark.parametrize(
    ("snippet", "key", "reason"),
    [
        ("daemon:\n  poll_interval: .nan\n", "daemon.poll_interval", "nan: not a number"),
        ("daemon:\n  poll_interval: .inf\n", "daemon.poll_interval", "inf: must be finite"),
        ("daemon:\n  poll_interval: -5\n", "daemon.poll_interval", "must not be negative"),
        (
            "daemon:\n  poll_interval: 99999999999999999999d\n",
            "daemon.poll_interval",
            "must be at most 1h",
        ),
        ("daemon:\n  poll_interval: 2h\n", "daemon.poll_interval", "must be at most 1h"),
        ("daemon:\n  poll_interval: yes\n", "daemon.poll_interval", "expected a duration"),
        ("staging:\n  backoff: .nan\n", "staging.backoff", "not a number"),
        ("staging:\n  reset:\n    delay: 366d\n", "staging.reset.delay", "at most 365d"),
        (
            "slurm:\n  command_timeout: '" + "9" * 400 + "-00'\n",
            "slurm.command_timeout",
            "must be at most 1h",
        ),
        (
            "daemon:\n  workers: 99999999999999999999999\n",
            "daemon.workers",
            "must be <= 1024, got 99999999999999999999999",
        ),
        ("staging:\n  retries: 1000\n", "staging.retries", "must be <= 100"),
        ("allocation:\n  max_request: 1000000\n", "allocation.max_request", "must be <= 100000"),
        (
            "slurm:\n  lockin:\n    priority: 4294967295\n",
            "slurm.lockin.priority",
            "must be <= 4294967293",
        ),
    ],
)
def test_numbers_must_be_finite_and_bounded(snippet: str, key: str, reason: str) -> None:
    issue = one_issue(POOL + snippet)
    assert issue.key == key
    assert reason in issue.reason
    assert "ambiguous" not in issue.reason


@pytest.mark.parametrize("capacity", ["2P", "9" * 400 + "P"])
def test_capacity_is_bounded(capacity: str) -> None:
    issue = one_issue(f"pool:\n  nodes:\n    - {{names: rsa1, capacity: '{capacity}'}}\n")
    assert issue.key == "pool.nodes[0].capacity"
    assert "must be at most 1P" in issue.reason or "too large" in issue.reason


@pytest.mark.parametrize(
    ("names", "reason"),
    [
        # ClusterShell would expand these (or fail an assert) before any check ran
        ("rsa[1-99999999999]", "range 1-99999999999 is too large: a pool has at most 10000"),
        ("rsa[1-20000]", "range 1-20000 is too large"),
        ("a[1-999]b[1-999]", "998001 nodes: a pool has at most 10000"),
    ],
)
def test_huge_hostlists_are_refused_before_expansion(names: str, reason: str) -> None:
    issue = one_issue(f'pool:\n  nodes:\n    - {{names: "{names}", capacity: 2G}}\n')
    assert issue.key == "pool.nodes[0].names" and issue.reason.startswith(reason)


def test_pool_size_is_bounded_in_all() -> None:
    text = "pool:\n  nodes:\n" + "".join(
        f'    - {{names: "{p}[1-6000]", capacity: 2G}}\n' for p in "ab"
    )
    issue = one_issue(text + "allocation: {max_nodes: 1}\n")
    assert (issue.key, issue.reason) == ("pool.nodes", "12000 nodes: a pool has at most 10000")


def test_every_number_key_has_an_upper_bound() -> None:
    def walk(cls: type, prefix: str) -> list[str]:
        unbounded = []
        for name, s in settings_of(cls):
            kind = s.kind.item if isinstance(s.kind, ListOf) else s.kind
            if isinstance(kind, Section):
                unbounded += walk(kind.cls, f"{prefix}{name}.")
            elif (isinstance(kind, Int) and kind.max is None) or (
                isinstance(kind, Duration) and not kind.max <= MAX_DURATION
            ):
                unbounded.append(f"{prefix}{name}")
        return unbounded

    assert walk(Config, "") == []
    assert "| `daemon.poll_interval` | duration ≤ 1h |" in generate_reference()


@pytest.mark.parametrize(
    ("snippet", "line", "reason"),
    [
        ("daemon: !foo {workers: 3}\n", 6, "unsupported YAML tag '!foo'"),
        ("daemon:\n  workers: !foo 3\n", 7, "tag '!foo'"),
        ("staging:\n  allowed_roots: !!set {/a: null}\n", 7, "unsupported YAML tag"),
        ("staging:\n  allowed_roots: !!omap [a: 1]\n", 7, "unsupported YAML tag"),
    ],
)
def test_unknown_yaml_tags_are_refused(snippet: str, line: int, reason: str) -> None:
    issue = one_issue(POOL + snippet)
    assert (issue.line, issue.key) == (line, "")
    assert issue.reason.startswith("invalid YAML: ") and reason in issue.reason


def test_standard_tags_still_work() -> None:
    cfg = load_config_text(POOL + "daemon: !!map {workers: !!int 3}\n")
    assert cfg.daemon.workers == 3


def test_deeply_nested_yaml_is_an_error_not_a_crash() -> None:
    issue = one_issue("a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert issue.reason == "invalid YAML: nested too deeply"


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("2G", 2 * G),
        ("3.5TB", int(3.5 * 1024 * G)),
        ("512MiB", 512 << 20),
        ("1048576", 1 << 20),
        ("1.5T", 1536 * G),
    ],
)
def test_sizes_in_slurm_dialect(text: str, nbytes: int) -> None:
    cfg = load_config_text(f'pool:\n  nodes:\n    - {{names: rsa1, capacity: "{text}"}}\n')
    assert cfg.pool.members()[0].capacity == nbytes


def test_nodeset_expansion_and_address_patterns() -> None:
    cfg = load_config_text(
        """
pool:
  nodes:
    - names: "rsa[01-03,07]"
      capacity: 1G
      address: "{name}-ib"
    - names: "fat[1-2]-n[1-2]"
      capacity: 1G
      tier: ssd
      ssh_port: 2200
    - names: "big[8-9]"
      capacity: 1G
      address: "10.9.0.{num}"
"""
    )
    nodes = cfg.pool.members()
    assert [n.name for n in nodes[:4]] == ["rsa01", "rsa02", "rsa03", "rsa07"]
    assert [n.address for n in nodes[:4]] == ["rsa01-ib", "rsa02-ib", "rsa03-ib", "rsa07-ib"]
    assert [n.name for n in nodes[4:8]] == ["fat1-n1", "fat1-n2", "fat2-n1", "fat2-n2"]
    assert [(n.address, n.ssh_port) for n in nodes[4:6]] == [("fat1-n1", 2200), ("fat1-n2", 2200)]
    assert [n.address for n in nodes[8:]] == ["10.9.0.8", "10.9.0.9"]
    assert cfg.pool.nodes[0].hosts() == ("rsa01", "rsa02", "rsa03", "rsa07")


def test_shared_trailing_number_collides() -> None:
    issue = one_issue(
        'pool:\n  nodes:\n    - {names: "fat[1-2]-n[1-2]", capacity: 1G, address: "10.9.0.{num}"}\n'
    )
    assert issue.key == "pool.nodes[0].address"
    assert "same address and port 10.9.0.1:22" in issue.reason


def test_ipv6_listen_and_single_fixed_address() -> None:
    cfg = load_config_text(
        POOL.replace(
            "capacity: 2G", "capacity: 2G\n    - {names: solo, capacity: 1G, address: 10.0.0.9}"
        )
        + "metrics:\n  listen: '[::1]:9465'\n"
    )
    assert cfg.metrics.listen == HostPort("::1", 9465)
    assert str(cfg.metrics.listen) == "[::1]:9465"
    assert cfg.pool.members()[-1].address == "10.0.0.9"


# --------------------------------------------------------------------------- beeond

BEEOND = "filesystem:\n  backend: {ram: beeond}\n  beeond:\n"


def test_beeond_options_load_typed() -> None:
    cfg = load_config_text(POOL + BEEOND + """\
    beegfs_major: 7
    storage_servers: 2
    metadata_servers: 0
    storage: tmpfs
    prefer_local: true
    use_pdsh: true
    pdsh_path: /usr/local/bin/pdsh
    config_dir: /etc/beegfs/beeond
    log_dir: /var/log/bo
    keep_logs: true
    port_shift_min: 2000
    port_shift_max: 2990
    kill_after: 30s
    stop_backoff: 0s
    client_options: [connMgmtdPortTCP=9008, "connInterfacesList=/etc/beegfs/ib.conf"]
""")
    b = cfg.filesystem.beeond
    assert (b.beegfs_major, b.storage_servers, b.metadata_servers) == (7, 2, 0)
    assert b.storage == BeeondStorage.TMPFS and b.prefer_local and b.use_pdsh and b.keep_logs
    assert (b.pdsh_path, b.config_dir, b.log_dir) == (
        Path("/usr/local/bin/pdsh"), Path("/etc/beegfs/beeond"), Path("/var/log/bo"))
    assert (b.port_shift_min, b.port_shift_max, b.kill_after, b.stop_backoff) == (
        2000, 2990, 30.0, 0.0)
    assert b.client_options == ("connMgmtdPortTCP=9008",
                                "connInterfacesList=/etc/beegfs/ib.conf")
    again = config_from_mapping(cfg.to_dict())
    assert again.filesystem.beeond == b
    shipped = load_defaults().filesystem.beeond
    assert (shipped.pdsh_path, shipped.config_dir, shipped.use_pdsh) == (None, None, False)
    assert load_defaults().to_dict()["filesystem"]["beeond"]["config_dir"] == ""


@pytest.mark.parametrize(
    ("snippet", "key", "reason"),
    [
        ("    beegfs_major: 6\n", "beegfs_major", "must be >= 7, got 6"),
        ("    beegfs_major: '8'\n", "beegfs_major", "expected an integer, got string '8'"),
        ("    storage_servers: -1\n", "storage_servers", "must be >= 0, got -1"),
        ("    metadata_servers: many\n", "metadata_servers", "expected an integer"),
        ("    storage: ram\n", "storage", "expected one of pool_dir, tmpfs, got string 'ram'"),
        ("    use_pdsh: 'yes'\n", "use_pdsh", "expected true or false, got string 'yes'"),
        ("    keep_logs: 1\n", "keep_logs", "expected true or false, got number 1"),
        ("    pdsh_path: /usr/bin/pdsh\n", "pdsh_path",
         "set, but use_pdsh is false; set use_pdsh: true or remove pdsh_path"),
        ("    use_pdsh: true\n    pdsh_path: pdsh\n", "pdsh_path",
         "must be an absolute path, got 'pdsh'"),
        ("    config_dir: /etc/../beegfs\n", "config_dir", "without '.', '..' or NUL"),
        ("    log_dir: ''\n", "log_dir", "expected an absolute path, got string ''"),
        ("    port_shift_min: 3000\n    port_shift_max: 2000\n", "port_shift_max",
         "must be >= port_shift_min (3000)"),
        ("    port_shift_max: 57526\n", "port_shift_max", "must be <= 57525, got 57526"),
        ("    kill_after: 10\n", "kill_after", "ambiguous duration 10: add a unit"),
        ("    stop_backoff: 2h\n", "stop_backoff", "at most"),
        ("    client_options: logLevel=3\n", "client_options", "expected a list"),
        ("    client_options: [logLevel]\n", "client_options[0]",
         "logLevel needs a value (logLevel=...)"),
        ("    client_options: [logLevel=3, connAuthFile=/x]\n", "client_options[1]",
         "connAuthFile is set by rsad on every mount; remove it"),
        ("    client_options: ['logLevel=3,grpid']\n", "client_options[0]",
         "'logLevel=3,grpid' is not one mount option (key=value, no commas or spaces)"),
        ("    client_options: [tuneFileCacheType=native]\n", "client_options[0]",
         "tuneFileCacheType is not a mount option of the BeeGFS 8 client (one of "
         "connDisableIPv6, connInterfacesList, connMgmtdPort, logLevel, logStdFile, "
         "sysMountSanityCheckMS, tunePreferredMetaFile, tunePreferredStorageFile)"),
        ("    beegfs_major: 7\n    client_options: [connMgmtdPort=9008]\n",
         "client_options[0]", "connMgmtdPort is not a mount option of the BeeGFS 7 client"),
        ("    sotrage: tmpfs\n", "sotrage", "unknown key; did you mean 'storage'?"),
    ],
)
def test_beeond_errors(snippet: str, key: str, reason: str) -> None:
    issue = one_issue(POOL + BEEOND + snippet)
    assert issue.key == f"filesystem.beeond.{key}"
    assert reason in issue.reason, issue.reason
    assert str(issue).startswith(f"site.yaml:{issue.line}: filesystem.beeond.{key}: ")


def test_beeond_tmpfs_storage_is_for_the_ram_tier_only() -> None:
    ssd = '    - {names: "ssd1", capacity: 1T, tier: ssd}\n'
    tmpfs = "    storage: tmpfs\n"
    issue = one_issue(POOL + ssd + "filesystem:\n  backend: {ram: beeond, ssd: beeond}\n"
                      "  beeond:\n" + tmpfs)
    assert (issue.key, issue.reason) == (
        "filesystem.beeond.storage",
        "tmpfs would keep the ssd tier's RAMDISKs in RAM; use pool_dir (or another "
        "backend for ssd)")
    # no ssd nodes, or another backend serves them: fine
    load_config_text(POOL + "filesystem:\n  backend: {ram: beeond, ssd: beeond}\n"
                     "  beeond:\n" + tmpfs)
    load_config_text(POOL + ssd + BEEOND + tmpfs)


def test_warnings(tmp_path: Path) -> None:
    cfg = load_config_text(
        "pool:\n  nodes:\n    - {names: rsa1, capacity: 1G}\nssh:\n  host_key_policy: auto-add\n"
    )
    assert len(cfg.warnings) == 2
    assert "allocation.max_nodes: tier ram has only 1 node" in cfg.warnings[0]
    assert "ssh.host_key_policy: auto-add trusts any host key" in cfg.warnings[1]
    site = tmp_path / "rsa.yaml"
    site.write_text(POOL + "allocation:\n  max_nodes: 4\n")
    site.chmod(0o644)
    assert load_config(site, env={}).warnings == ()
    site.chmod(0o666)
    (warning,) = load_config(site, env={}).warnings
    assert "writable by group or others" in warning and f"chmod go-w {site}" in warning


def test_an_allowed_root_containing_a_private_place_is_warned_about() -> None:
    """Found by review (issue 36): a root that contains /tmp, /var/tmp or /dev/shm would
    let DATA_IN or DATA_OUT name a place staging commands see a private copy of."""
    cfg = load_config_text(POOL + "staging:\n  allowed_roots: [/var, /pfs]\n")
    (warning,) = [w for w in cfg.warnings if "allowed_roots" in w]
    assert "/var contains /var/tmp: a DATA_IN or DATA_OUT there would not be seen" in warning


def test_to_dict_round_trips_and_is_json(lab: Path) -> None:
    cfg = load_config(lab, env={})
    data = cfg.to_dict()
    json.dumps(data)
    assert data["pool"]["nodes"][1]["capacity"] == "3.5T"
    assert data["daemon"]["poll_interval"] == "5s"
    assert data["daemon"]["api"]["listen"] == "127.0.0.1:7820"
    again = config_from_mapping(data)
    assert again == dataclasses.replace(cfg, source=None)
    # and through YAML text, as `rsa config show` prints it
    assert load_config_text(yaml.safe_dump(data)) == dataclasses.replace(cfg, source=None)
    assert config_from_mapping(load_defaults().to_dict(), require_pool=False) == load_defaults()


@pytest.mark.parametrize(
    "seconds", [0.0, 0.25, 1.5, 5.0, 59.0, 60.0, 90.0, 3600.0, 86400.0, 93784.0]
)
def test_duration_rendering_round_trips(seconds: float) -> None:
    assert parse_duration(format_duration_short(seconds)) == seconds


@pytest.mark.parametrize(
    "nbytes", [1, 1000, 1024, 2 * G, 3 * G + 1, int(3.5 * 1024 * G), 1234567 * 1024]
)
def test_size_rendering_round_trips(nbytes: int) -> None:
    assert parse_size(format_size_exact(nbytes)) == nbytes


def test_defaults_file_documents_every_key() -> None:
    text = defaults_text()
    assert DEFAULTS_PATH.name == "defaults.yaml"
    data = yaml.safe_load(text)

    def keys(cls: type, value: dict[str, object], prefix: str) -> None:
        for name, s in settings_of(cls):
            kind = s.kind
            assert name in value, f"{prefix}{name} missing from defaults.yaml"
            cls_ = getattr(kind, "cls", None)
            if cls_ is not None:
                sub = value[name]
                assert isinstance(sub, dict)
                keys(cls_, sub, f"{prefix}{name}.")

    keys(Config, data, "")
    # list-item keys are documented in comments
    for name in ("names", "capacity", "tier", "address", "ssh_port", "pool_dir"):
        assert f"#   {name}" in text


def test_the_shipped_example_and_its_beeond_block_are_valid() -> None:
    text = (REPO / "examples" / "rsa.yaml").read_text(encoding="utf-8")
    cfg = load_config_text(text, file="examples/rsa.yaml")
    assert cfg.filesystem.backend[Tier.RAM] == "moosefs"
    # as shipped (/etc/rsa/rsa.yaml), a locked-in job runs under its own QOS (issue 39)
    assert cfg.slurm.lockin.method is LockinMethod.PRIORITY
    assert cfg.slurm.lockin.priority == 4_294_967_000  # = job_submit.lua's lockin_priority
    start = text.index("# >>> beeond\n") + len("# >>> beeond\n")
    block = text[start:text.index("# <<< beeond")]
    assert block and all(line.startswith("#") for line in block.splitlines())
    beeond = "".join(line[1:] + "\n" for line in block.splitlines())
    cfg = load_config_text(text + beeond, file="examples/rsa.yaml")
    b = cfg.filesystem.beeond
    assert cfg.filesystem.backend[Tier.RAM] == "beeond"
    assert (b.use_pdsh, b.config_dir, b.client_options) == (
        True, Path("/etc/beegfs/beeond"), ("connInterfacesList=/etc/beegfs/ib.conf",))


# --------------------------------------------------------------------------- reference


def test_operator_guide_holds_the_generated_reference() -> None:
    doc = (REPO / "docs" / "operator-guide.md").read_text(encoding="utf-8")
    assert "## Configuration" in doc
    assert extract(doc) == generate_reference(), (
        "run: rsa config reference --update docs/operator-guide.md"
    )


def test_reference_lists_every_key() -> None:
    ref = generate_reference()
    assert ref.startswith(BEGIN) and ref.rstrip().endswith(END)
    for key in (
        "daemon.api.listen",
        "slurm.lockin.method",
        "allocation.ratio",
        "pool.nodes[].capacity",
        "filesystem.backend",
        "staging.reset.trigger",
        "metrics.listen",
    ):
        assert f"| `{key}` |" in ref
    assert "| `pool.nodes[].names` | hostlist | **required** |" in ref
    assert "| `daemon.poll_interval` | duration ≤ 1h | `5s` |" in ref


def test_splice_replaces_only_the_block() -> None:
    doc = f"# T\n\nbefore\n\n{BEGIN}\nold\n{END}\n\nafter\n"
    new = splice(doc)
    assert new.startswith("# T\n\nbefore\n\n") and new.endswith("\n\nafter\n")
    assert extract(new) == generate_reference()
    with pytest.raises(ValueError, match="no config reference block"):
        splice("# no markers\n")


# --------------------------------------------------------------------------- CLI


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("RSA_CONFIG", raising=False)
    return cli_runner()


def test_cli_check_ok(runner: CliRunner, lab: Path) -> None:
    result = runner.invoke(cli, ["config", "check", str(lab)])
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"OK {lab}: 6 RSA nodes (ram: rsa[1-4], 8G total, moosefs; ssd: rsa-ssd[1-2], 7T total, "
        "moosefs); 1 RSA node per 1 compute node, 1-4 per job; lock-in priority\n"
    )
    assert result.stderr == ""


def test_cli_check_errors(runner: CliRunner) -> None:
    path = CONFIGS / "bad-cross.yaml"
    result = runner.invoke(cli, ["config", "check", str(path)])
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 5
    assert lines[0] == f"{path}:3: allocation.max_nodes: max_nodes must be >= min_nodes"


def test_cli_check_json(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["config", "check", "--json", str(LAB)])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["nodes"] == 6
    assert data["tiers"]["ssd"] == {
        "nodes": 2,
        "hostlist": "rsa-ssd[1-2]",
        "capacity": "7T",
        "backend": "moosefs",
        "price": 1.0,
        "bandwidth": "1.5G",
    }
    assert data["allocation"]["io_time"] == 300.0
    result = runner.invoke(cli, ["config", "check", "--json", str(CONFIGS / "bad-syntax.yaml")])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data == {
        "ok": False,
        "errors": [
            {
                "file": str(CONFIGS / "bad-syntax.yaml"),
                "line": 3,
                "key": "",
                "reason": "invalid YAML: mapping values are not allowed here",
            }
        ],
    }


def test_cli_check_uses_rsa_config_env(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["config", "check"], env={"RSA_CONFIG": str(LAB)})
    assert result.exit_code == 0 and result.stdout.startswith(f"OK {LAB}:")


def test_cli_check_missing_default(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "DEFAULT_CONFIG_PATH", tmp_path / "rsa.yaml")
    result = runner.invoke(cli, ["config", "check"])
    assert result.exit_code == 1
    assert "start from `rsa config show --defaults`" in result.stderr


def test_cli_check_takes_config_option_like_rsad(runner: CliRunner, lab: Path) -> None:
    # The missing-file hint says "pass --config FILE": the check command takes it too.
    result = runner.invoke(cli, ["config", "check", "--config", str(lab)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"OK {lab}:")
    result = runner.invoke(cli, ["config", "show", "--config", str(lab)])
    assert result.exit_code == 0 and result.stdout.startswith(f"# effective configuration of {lab}")
    result = runner.invoke(cli, ["config", "check", str(lab), "--config", "/other.yaml"])
    assert result.exit_code == 2 and "give FILE or --config FILE, not both" in result.stderr


def test_cli_check_missing_default_hint_works(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lab: Path
) -> None:
    monkeypatch.setattr(loader, "DEFAULT_CONFIG_PATH", tmp_path / "rsa.yaml")
    result = runner.invoke(cli, ["config", "check"])
    assert "pass --config FILE" in result.stderr
    assert runner.invoke(cli, ["config", "check", "--config", str(lab)]).exit_code == 0


def test_cli_check_prints_warnings_on_stderr(runner: CliRunner, tmp_path: Path) -> None:
    site = tmp_path / "rsa.yaml"
    site.write_text("pool:\n  nodes:\n    - {names: rsa1, capacity: 1G}\n")
    site.chmod(0o600)
    result = runner.invoke(cli, ["config", "check", str(site)])
    assert result.exit_code == 0
    assert result.stderr.startswith(f"warning: {site}: allocation.max_nodes: ")
    assert result.stdout.startswith(f"OK {site}: 1 RSA node (")


def test_cli_show(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["config", "show", str(LAB)])
    assert result.exit_code == 0
    assert result.stdout.startswith(f"# effective configuration of {LAB}\n")
    shown = yaml.safe_load(result.stdout)
    cfg = load_config(LAB, env={})
    assert shown == cfg.to_dict()
    result = runner.invoke(cli, ["config", "show", "--json", str(LAB)])
    assert json.loads(result.stdout) == cfg.to_dict()
    result = runner.invoke(cli, ["config", "show", str(CONFIGS / "bad-values.yaml")])
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 11


def test_cli_show_defaults(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["config", "show", "--defaults"])
    assert result.exit_code == 0
    assert result.stdout == defaults_text()
    result = runner.invoke(cli, ["config", "show", "--defaults", "--json"])
    assert json.loads(result.stdout) == load_defaults().to_dict()
    result = runner.invoke(cli, ["config", "show", "--defaults", str(LAB)])
    assert result.exit_code == 2


def test_cli_reference(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["config", "reference"])
    assert result.exit_code == 0 and result.stdout == generate_reference()
    doc = tmp_path / "guide.md"
    doc.write_text(f"# G\n\n{BEGIN}\nstale\n{END}\n")
    result = runner.invoke(cli, ["config", "reference", "--update", str(doc)])
    assert result.exit_code == 0 and "updated" in result.stdout
    assert extract(doc.read_text()) == generate_reference()
    result = runner.invoke(cli, ["config", "reference", "--update", str(doc)])
    assert "already up to date" in result.stdout


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RSA_CONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "rsa_scheduler", "config", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def test_real_process_check_ok() -> None:
    proc = _run("check", str(LAB))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"OK {LAB}: 6 RSA nodes")
    assert proc.stdout.count("\n") == 1


def test_real_process_check_errors() -> None:
    path = CONFIGS / "bad-values.yaml"
    proc = _run("check", str(path))
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 11
    assert all(line.startswith(f"{path}:") for line in lines)
    assert f"{path}:16: pool.nodes[1].capacity: invalid size 'lots'" in proc.stderr


def test_config_option_reads_flag_and_env(runner: CliRunner) -> None:
    import click

    from rsa_scheduler.cli.config import config_option

    @click.command()
    @config_option
    def probe(config_file: str | None) -> None:
        click.echo(load_config(config_file).source)

    assert runner.invoke(probe, ["--config", str(LAB)]).stdout == f"{LAB}\n"
    assert runner.invoke(probe, [], env={"RSA_CONFIG": str(LAB)}).stdout == f"{LAB}\n"


def test_a_custom_copy_tool_needs_a_usable_copy_command() -> None:
    ok = load_config_text(POOL + "staging:\n  copy_tool: custom\n  copy_command: "
                          "'rsync -a --from0 --files-from={list} {recursive} {src}/ {dst}/'\n")
    assert ok.staging.copy_tool == "custom"
    for text, want in [
        ("staging:\n  copy_tool: custom\n",
         "staging.copy_command: is not set: give the command that copies the names in "
         "{list} from {src} to {dst} (copy_tool is custom)"),
        ("staging:\n  copy_tool: custom\n  copy_command: 'cp {src} {dst} {lst}'\n",
         "staging.copy_command: unknown placeholder {lst}: use {src}, {dst}, {list}, "
         "{recursive} (copy_tool is custom)"),
    ]:
        with pytest.raises(ConfigErrors) as e:
            load_config_text(POOL + text)
        assert want in str(e.value), str(e.value)
    warned = load_config_text(POOL + "staging:\n  copy_command: 'x {src} {dst} {list}'\n")
    assert any("copy_command: set, but copy_tool is engine" in w for w in warned.warnings)


def test_staging_in_rsads_own_process_is_warned_unbounded() -> None:
    """staging.engine_process: false puts every list of a job's files in rsad's own
    process, which no staging.engine_memory bounds: rsa config check and rsad's log
    say so (docs/security.md, "Memory of rsad's host")."""
    off = load_config_text(POOL + "staging:\n  engine_process: false\n")
    said = [w for w in off.warnings if "staging.engine_process: false:" in w]
    assert len(said) == 1 and "staging.engine_memory does not bound" in said[0]
    assert "can take all the memory of rsad's host" in said[0]
    assert not [w for w in load_config_text(POOL).warnings if "engine_process" in w]


def test_staging_workers_without_a_memory_bound_are_warned() -> None:
    """staging.engine_memory empty leaves the staging workers unbounded (documented,
    not warned before): rsa config check says so; the default (8G) is quiet."""
    (said,) = [w for w in load_config_text(POOL + "staging:\n  engine_memory: null\n")
               .warnings if "engine_memory" in w]
    assert "staging.engine_memory: empty: no bound on a staging worker's memory" in said
    assert "give a size (the default: 8G)" in said
    assert not [w for w in load_config_text(POOL).warnings if "engine_memory" in w]


def test_striping_is_off_and_streamed_mode_on_unless_the_operator_says_otherwise() -> None:
    from rsa_scheduler.staging.stream import STREAM_OBJECTS

    shipped = load_config_text(POOL)
    assert shipped.staging.stripe_bytes == 0
    assert shipped.staging.stream_objects == STREAM_OBJECTS == 20000  # it resumes now
    for off in ("null", ""):  # empty: every tree listed in rsad, as before
        assert load_config_text(
            POOL + f"staging:\n  stream_objects: {off}\n").staging.stream_objects is None
    on = load_config_text(POOL + "staging:\n  stripe_bytes: 256M\n  stream_objects: 50000\n")
    assert on.staging.stripe_bytes == 256 << 20 and on.staging.stream_objects == 50000
    # striping is slower on the lab (a measurement): one warning, nothing else about it
    assert [w for w in on.warnings if "staging." in w] == [
        "<string>:7: staging.stripe_bytes: striped copies ran slower than one stream per "
        "file on the lab, whose RSA nodes share two cores (docs/benchmarks.md); measure "
        "on your RSA nodes with bench/bench_staging.py before leaving it on"]
    assert "stripe_bytes: must be larger than 0" not in str(
        load_config_text(POOL + "staging:\n  stripe_bytes: 0\n").warnings)
    for text, want in [
        ("staging:\n  stripe_bytes: -1M\n", "staging.stripe_bytes"),
        ("staging:\n  stream_objects: 10\n", "staging.stream_objects"),
        ("staging:\n  stream_objects: 0\n", "staging.stream_objects"),
    ]:
        assert want in str(one_issue(POOL + text))
    small = load_config_text(POOL + "staging:\n  stripe_bytes: 64M\n")
    assert any("stripe_bytes: files below 128M are never split" in w
               for w in small.warnings), small.warnings
    rsync = load_config_text(POOL + "staging:\n  copy_tool: rsync\n  stripe_bytes: 1G\n")
    assert any("stripe_bytes: set, but copy_tool is rsync" in w for w in rsync.warnings)


def test_the_data_path_hands_the_staging_settings_to_the_engine() -> None:
    from rsa_scheduler.daemon import data

    src = inspect.getsource(data.DataPath)
    assert "stripe_bytes=st.stripe_bytes" in src
    assert "stream_objects=st.stream_objects or 0" in src


def test_health_checks_can_be_turned_off_with_0s_as_documented() -> None:
    cfg = load_config_text(POOL + "health:\n  interval: 0s\n  ramdisk_interval: 0s\n")
    assert cfg.health.interval == 0 and cfg.health.ramdisk_interval == 0


def test_shared_dirs_outside_the_allowed_roots_are_warned_about() -> None:
    assert load_defaults().staging.shared_dirs == ()
    cfg = load_config_text(POOL + "staging:\n  shared_dirs: [/home/proj, /proj]\n")
    assert cfg.staging.shared_dirs == (Path("/home/proj"), Path("/proj"))
    (warning,) = [w for w in cfg.warnings if "shared_dirs" in w]
    assert "staging.shared_dirs[1]: /proj is not inside staging.allowed_roots" in warning


# --------------------------------------------------------------------------- ports


def test_the_api_port_is_none_of_slurms_and_a_config_naming_6820_keeps_working() -> None:
    from rsa_scheduler.client import API_PORT, host_and_port
    from rsa_scheduler.config.checks import SLURM_PORTS

    assert API_PORT not in SLURM_PORTS and not 6817 <= API_PORT <= 6830
    # a host alone: rsad's port, on both ends (the listener and the clients)
    cfg = load_config_text("daemon:\n  api:\n    listen: 10.1.0.5\n", file="site.yaml",
                           require_pool=False)
    assert cfg.daemon.api.listen == HostPort("10.1.0.5", API_PORT)
    assert cfg.warnings == ()
    assert host_and_port("10.1.0.5") == ("10.1.0.5", API_PORT)
    assert host_and_port("[fd00::5]") == ("fd00::5", API_PORT)
    assert host_and_port("[fd00::5]:6820") == ("fd00::5", 6820)
    # an older site's 6820 (the guides' example before): still served, with one warning
    cfg = load_config_text("daemon:\n  api:\n    listen: 0.0.0.0:6820\n", file="site.yaml",
                           require_pool=False)
    assert cfg.daemon.api.listen == HostPort("0.0.0.0", 6820)
    assert cfg.warnings == (
        "site.yaml:3: daemon.api.listen: port 6820 is slurmrestd's usual port (and a "
        "SlurmctldPort range from 6817 may reach it): where that daemon listens on this "
        "host, it or rsad cannot start; rsad's API port is 7820 (docs/ports.md): move to "
        "it with every host's client.conf and rsa.yaml, RSA_API and burst_buffer.lua's "
        "CONFIG.api",)
    assert host_and_port("rsad-host:6820") == ("rsad-host", 6820)
    # the metrics endpoint still needs its port
    with pytest.raises(ConfigErrors, match=r"metrics\.listen: expected host:port \(e\.g\. "
                       r"127\.0\.0\.1:9465"):
        load_config_text("metrics:\n  listen: 127.0.0.1\n", require_pool=False)


def test_a_hook_timeout_past_its_wrappers_backstop_is_warned() -> None:
    """The node hooks' wrappers kill them at a backstop of slurmd's environment (20 s
    for the Epilog, 330 s for the Prolog by default): a hooks.timeout (+ max_hold for the
    Prolog) the hook cannot reach and unwind before it was only documented. rsa config
    check now says so, with the value to set; the defaults are quiet, and the backstops
    it assumes are the wrappers' own defaults."""
    from rsa_scheduler.config.checks import HOOK_BACKSTOPS

    for hook, backstop in HOOK_BACKSTOPS.items():
        text = hook_wrapper(f"rsa-{hook}").read_text()
        assert f'"${{RSA_{hook.upper()}_BACKSTOP:-{backstop:.0f}}}"' in text, hook
    assert not [w for w in load_config_text(POOL).warnings if "BACKSTOP" in w]
    (epilog,) = [w for w in load_config_text(POOL + "hooks:\n  timeout: 18s\n").warnings
                 if "BACKSTOP" in w]
    assert "hooks.timeout: the Epilog's wrapper kills it at 20 s (RSA_EPILOG_BACKSTOP's " \
        "default), before hooks.timeout and 5 s to unwind" in epilog, epilog
    assert "set RSA_EPILOG_BACKSTOP to at least 23 in slurmd's environment" in epilog
    (prolog,) = [w for w in load_config_text(POOL + "hooks:\n  max_hold: 10m\n").warnings
                 if "BACKSTOP" in w]
    assert "hooks.max_hold: the Prolog's wrapper kills it at 330 s" in prolog, prolog
    assert "before hooks.timeout + hooks.max_hold" in prolog
    assert "RSA_PROLOG_BACKSTOP to at least 615" in prolog
