"""The configuration's cross-field checks: what no single key can say wrong by itself.

Owns :class:`Checks` (the pool's names and addresses, the allocation against the pool's
tiers, the filesystem backends through :func:`~rsa_scheduler.config.backends.check_backends`,
staging, hooks, SSH and listen addresses); each check runs only when the sections it
reads converted, so one load reports every problem. Must not import the loader or the CLI.
"""

from __future__ import annotations

import re
import string
from pathlib import PurePath, PurePosixPath
from typing import Any, Final

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from rsa_scheduler.client import API_PORT
from rsa_scheduler.config.backends import check_backends
from rsa_scheduler.config.schema import (
    ADDRESS_FIELDS,
    MAX_POOL_NODES,
    FilesystemConfig,
    HooksConfig,
    HostKeyPolicy,
    PoolConfig,
    PoolNodeGroup,
    StagingConfig,
    node_address,
)
from rsa_scheduler.config.validate import BAD, Validator
from rsa_scheduler.config.yamldoc import KeyPath, suggest
from rsa_scheduler.core.policy import AllocationPolicy, Tier
from rsa_scheduler.core.units import format_size
from rsa_scheduler.staging.plan import STRIPE_MIN
from rsa_scheduler.staging.scripts import check_copy_command

#: the ports Slurm's own daemons listen on by default or by custom (docs/ports.md)
SLURM_PORTS: Final = {
    6817: "slurmctld's (SlurmctldPort)",
    6818: "slurmd's (SlurmdPort)",
    6819: "slurmdbd's (DbdPort)",
    6820: "slurmrestd's usual port (and a SlurmctldPort range from 6817 may reach it)",
}

_ADDRESS_RE: Final = re.compile(r"^[A-Za-z0-9._:-]+$")

#: the node hooks' wrappers' backstops when slurmd's environment sets none (the
#: ``timeout`` in prolog_epilog/rsa-prolog and rsa-epilog: RSA_PROLOG_BACKSTOP,
#: RSA_EPILOG_BACKSTOP), and what a hook needs past its own timeout to unwind (its
#: mounts undone, rsad told) before the backstop's SIGTERM
HOOK_BACKSTOPS: Final = {"prolog": 330.0, "epilog": 20.0}
HOOK_UNWIND: Final = 5.0

#: the shortest quarantine.remind_every: rsad looks for quarantined jobs to remind of once
#: a minute (daemon/service.py REMIND_EVERY), so a shorter one would not be kept
REMIND_MIN: Final = 60.0


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


class Checks:
    """Cross-field checks; each runs only when the sections it reads are valid."""

    def __init__(self, v: Validator, sections: dict[str, Any]) -> None:
        self.v = v
        self.s = sections

    def ok(self, *names: str) -> bool:
        return all(self.s[name] is not BAD for name in names)

    def pool(self, require_pool: bool) -> None:
        if self.ok("pool"):
            before = len(self.v.issues)
            check_pool(self.v, self.s["pool"], require_pool)
            if len(self.v.issues) > before:
                self.s["pool"] = BAD  # e.g. a bad address pattern: do not expand it

    def allocation(self) -> None:
        if not self.ok("pool", "allocation", "filesystem"):
            return
        v = self.v
        policy: AllocationPolicy = self.s["allocation"]
        pool: PoolConfig = self.s["pool"]
        by_tier = {tier: len(nodes) for tier, nodes in pool.by_tier().items()}
        fs: FilesystemConfig = self.s["filesystem"]
        chosen = {t: str(fs.backend.get(t)) for t in by_tier}
        mixes = policy.mix and len(set(chosen.values())) == 1
        if by_tier:
            tier = policy.default_tier
            if tier is Tier.AUTO:  # auto may use any tier: the largest bounds a job
                tier = max(by_tier, key=lambda t: by_tier[t])
            have = by_tier.get(tier, 0)
            if policy.default_tier is Tier.AUTO and mixes:  # or all of them together
                have = sum(by_tier.values())
            if have == 0:
                present = ", ".join(t.value for t in by_tier)
                v.error(
                    ("allocation", "default_tier"),
                    f"tier {tier.value} has no nodes in pool.nodes (tiers present: {present})",
                )
            elif policy.min_nodes > have:
                v.error(
                    ("allocation", "min_nodes"),
                    f"every job needs {_nodes(policy.min_nodes)} but tier {tier.value} has "
                    f"only {_nodes(have)}",
                )
            elif policy.max_nodes > have:
                v.warn(
                    ("allocation", "max_nodes"),
                    f"tier {tier.value} has only {_nodes(have)}; jobs sized for more never "
                    "get an RSA (allocation is all-or-nothing)",
                )
        if policy.mix and len(set(chosen.values())) > 1:
            names = ", ".join(f"{t.value} {b}" for t, b in sorted(chosen.items()))
            v.warn(("allocation", "mix"), f"the tiers use different backends ({names}): "
                   "one filesystem cannot span them, so tier auto never mixes tiers; give "
                   "them one filesystem.backend, or set mix: false")

    def backends(self) -> None:
        """Ask the registered backends (config/backends.py): their own settings, and
        whether each one a tier chose can serve it."""
        if not self.ok("filesystem"):
            return
        pool = self.s["pool"] if self.ok("pool") else None
        policy = self.s["allocation"] if self.ok("allocation") else None
        for finding in check_backends(self.s["filesystem"], pool, policy):
            if finding.warning:
                self.v.warn(finding.key, finding.reason)
            else:
                self.v.error(finding.key, finding.reason)

    def others(self) -> None:
        v = self.v
        if self.ok("quarantine"):
            q = self.s["quarantine"]
            if q.rescue_after and q.rescue_dir is None:
                v.error(("quarantine", "rescue_dir"), "must be set when "
                        "quarantine.rescue_after is (where rescued output goes on the PFS)")
            if q.remind_every < REMIND_MIN:
                v.error(("quarantine", "remind_every"), "must be at least 1m (rsad looks for "
                        "quarantined jobs once a minute)")
        if self.ok("staging"):
            staging: StagingConfig = self.s["staging"]
            if staging.backoff_max < staging.backoff:
                v.error(("staging", "backoff_max"), "must be >= staging.backoff")
            if not staging.allowed_roots:
                v.error(("staging", "allowed_roots"), "must list at least one directory")
            for i, d in enumerate(staging.shared_dirs):
                if not any(d == r or r in d.parents for r in staging.allowed_roots):
                    v.warn(("staging", "shared_dirs", i), f"{d} is not inside "
                           f"staging.allowed_roots: nothing is ever mounted there")
            if staging.private_tmp < 1 << 20:
                v.error(("staging", "private_tmp"), "must be at least 1M")
            for root in staging.allowed_roots:
                under = user_writable_place(root)
                if under is not None:
                    v.error(("staging", "allowed_roots"), f"{root} is on {under}: staging "
                            f"commands on RSA nodes have a private {under} of their own "
                            "and would not see it; keep DATA_IN and DATA_OUT on the PFS")
                inside = [p for p in USER_WRITABLE_PLACES
                          if PurePosixPath(root) in PurePosixPath(p).parents]
                if inside:
                    v.warn(("staging", "allowed_roots"), f"{root} contains "
                           f"{', '.join(inside)}: a DATA_IN or DATA_OUT there would not be "
                           "seen by staging commands on RSA nodes (they get private ones); "
                           "name the PFS's own directories instead")
            if not staging.engine_process:
                v.warn(("staging", "engine_process"), "false: staging runs in rsad's own "
                       "process, which staging.engine_memory does not bound; only "
                       "staging.writable_objects and staging.stream_objects bound its "
                       "lists, and a job with millions of files (a tar stage-out, a "
                       "write-back, DATA_OUT of a verify) can take all the memory of "
                       "rsad's host (docs/security.md, \"Memory of rsad's host\")")
            elif staging.engine_memory is None:
                v.warn(("staging", "engine_memory"), "empty: no bound on a staging "
                       "worker's memory; a job with millions of files (a tar stage-out, "
                       "a write-back, DATA_OUT of a verify) can take all the memory of "
                       "rsad's host, and the kernel's OOM killer chooses what dies "
                       "(docs/security.md, \"Memory of rsad's host\"); give a size "
                       "(the default: 8G)")
            if staging.copy_tool == "custom":
                try:
                    check_copy_command(staging.copy_command or "")
                except ValueError as e:
                    v.error(("staging", "copy_command"), f"{e} (copy_tool is custom)")
            elif staging.copy_command:
                v.warn(("staging", "copy_command"), f"set, but copy_tool is "
                       f"{staging.copy_tool}: it is not used")
            if staging.stripe_bytes and staging.copy_tool != "engine":
                v.warn(("staging", "stripe_bytes"), f"set, but copy_tool is "
                       f"{staging.copy_tool}: only the engine stripes; files are copied "
                       "whole")
            elif 0 < staging.stripe_bytes < 2 * STRIPE_MIN:
                v.warn(("staging", "stripe_bytes"), f"files below "
                       f"{format_size(2 * STRIPE_MIN)} are never split (a range is at "
                       f"least {format_size(STRIPE_MIN)})")
            if staging.stripe_bytes and staging.copy_tool == "engine":
                v.warn(("staging", "stripe_bytes"), "striped copies ran slower than one "
                       "stream per file on the lab, whose RSA nodes share two cores "
                       "(docs/benchmarks.md); measure on your RSA nodes with "
                       "bench/bench_staging.py before leaving it on")
        if self.ok("filesystem"):
            mount_root = self.s["filesystem"].mount_root
            under = user_writable_place(mount_root)
            if under is not None:
                v.error(("filesystem", "mount_root"), f"{mount_root} is on {under}: the "
                        "commands rsad runs as users on RSA nodes get a private "
                        f"{under} and would not see the RAMDISKs there; use /run/rsa/mnt")
        if self.ok("hooks"):
            hooks: HooksConfig = self.s["hooks"]
            if hooks.api_timeout > hooks.timeout:
                v.error(("hooks", "api_timeout"), "must not exceed hooks.timeout")
            self._hook_backstops(hooks)
        if self.ok("ssh") and self.s["ssh"].host_key_policy == HostKeyPolicy.AUTO_ADD:
            v.warn(("ssh", "host_key_policy"), "auto-add trusts any host key on first contact")
        if self.ok("daemon", "metrics"):
            api_listen = self.s["daemon"].api.listen
            if api_listen is not None and api_listen == self.s["metrics"].listen:
                v.error(("metrics", "listen"), f"same address as daemon.api.listen ({api_listen})")
            for key, listen in ((("daemon", "api", "listen"), api_listen),
                                (("metrics", "listen"), self.s["metrics"].listen)):
                if listen is not None and listen.port in SLURM_PORTS:
                    v.warn(key, f"port {listen.port} is {SLURM_PORTS[listen.port]}: where "
                           "that daemon listens on this host, it or rsad cannot start; "
                           f"rsad's API port is {API_PORT} (docs/ports.md): move to it with "
                           "every host's client.conf and rsa.yaml, RSA_API and "
                           "burst_buffer.lua's CONFIG.api")


    def _hook_backstops(self, hooks: HooksConfig) -> None:
        """A hook's own timeout must end before its wrapper's backstop kills it: a hook
        killed there leaves what it was doing half done (the Epilog: a mount not undone,
        rsad not told). The wrappers' backstops are slurmd's environment's, not this
        file's: warned against their defaults."""
        needs = {"prolog": hooks.timeout + hooks.max_hold + HOOK_UNWIND,
                 "epilog": hooks.timeout + HOOK_UNWIND}
        for hook, need in needs.items():
            backstop = HOOK_BACKSTOPS[hook]
            if need > backstop:
                what = ("hooks.timeout + hooks.max_hold" if hook == "prolog"
                        else "hooks.timeout")
                self.v.warn(("hooks", "max_hold" if hook == "prolog" else "timeout"), (
                    f"the {hook.capitalize()}'s wrapper kills it at {backstop:.0f} s "
                    f"(RSA_{hook.upper()}_BACKSTOP's default), before {what} and "
                    f"{HOOK_UNWIND:.0f} s to unwind: set RSA_{hook.upper()}_BACKSTOP to "
                    f"at least {need:.0f} in slurmd's environment on every compute node "
                    "(prolog_epilog/README.md)"))


def check_pool(v: Validator, pool: PoolConfig, require_pool: bool) -> None:
    groups = pool.nodes
    if not groups:
        if require_pool:
            v.error(
                ("pool", "nodes"),
                "no RSA nodes defined; add at least one entry with names and capacity "
                "(see `rsa config show --defaults`)",
                note_default=False,
            )
        return
    total = sum(len(NodeSet(g.names, resolver=RESOLVER_NOGROUP)) for g in groups)
    if total > MAX_POOL_NODES:
        v.error(("pool", "nodes"), f"{total} nodes: a pool has at most {MAX_POOL_NODES}")
        return
    seen: dict[str, int] = {}
    endpoints: dict[tuple[str, int], str] = {}
    for i, group in enumerate(groups):
        path: KeyPath = ("pool", "nodes", i)
        hosts = group.hosts()
        under = user_writable_place(group.pool_dir)
        if under is not None:
            v.error((*path, "pool_dir"), f"{group.pool_dir} is on {under}, which every user "
                    "can fill (and which every command run as a user sees as its own "
                    "private directory); give the pool a filesystem of its own, e.g. a "
                    "tmpfs on /var/lib/rsa-ram (operator guide, \"The pool's own "
                    "filesystem\")")
        for name in hosts:
            if name in seen:
                v.error(
                    (*path, "names"), f"node {name} is already defined in pool.nodes[{seen[name]}]"
                )
                break
            seen[name] = i
        if not check_address(v, group, hosts, (*path, "address")):
            continue
        for name in hosts:
            endpoint = (node_address(group.address, name), group.ssh_port)
            if endpoint in endpoints and endpoints[endpoint] != name:
                v.error(
                    (*path, "address"),
                    f"{name} and {endpoints[endpoint]} have the same address and port "
                    f"{endpoint[0]}:{endpoint[1]}",
                )
                break
            endpoints[endpoint] = name


#: the node directories every user can write: a pool (or a RAMDISK mount) below them is
#: shared with users, and hidden from the commands rsad runs as users (rsa_scheduler.contain)
USER_WRITABLE_PLACES: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/shm")


def user_writable_place(path: PurePath | str) -> str | None:
    """Which of :data:`USER_WRITABLE_PLACES` ``path`` is in or is, if any."""
    p = PurePosixPath(path)
    for place in USER_WRITABLE_PLACES:
        if p == PurePosixPath(place) or PurePosixPath(place) in p.parents:
            return place
    return None


def check_address(
    v: Validator, group: PoolNodeGroup, hosts: tuple[str, ...], path: KeyPath
) -> bool:
    if group.address is None:
        return True
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(group.address) if f is not None}
    except ValueError as e:
        v.error(path, f"invalid pattern {group.address!r}: {e}")
        return False
    unknown = used - set(ADDRESS_FIELDS)
    if unknown:
        field = sorted(unknown)[0]
        v.error(
            path,
            f"unknown placeholder {{{field}}} (use {{name}} or {{num}})"
            + suggest(field, ADDRESS_FIELDS),
        )
        return False
    if not used and len(hosts) > 1:
        v.error(
            path,
            f"a fixed address cannot serve {len(hosts)} nodes; use a pattern such as "
            "'{name}-ib' or '10.0.0.{num}', or one entry per node",
        )
        return False
    for name in hosts:
        if "num" in used and not re.search(r"\d$", name):
            v.error(path, f"{{num}} needs a trailing number in the node name, got {name!r}")
            return False
        try:
            address = node_address(group.address, name)
        except (ValueError, KeyError, IndexError) as e:
            v.error(path, f"invalid pattern {group.address!r}: {e}")
            return False
        if not _ADDRESS_RE.match(address):
            v.error(path, f"invalid address {address!r} for node {name}")
            return False
    return True
