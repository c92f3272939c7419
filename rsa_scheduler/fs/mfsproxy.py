"""The guard on mfsmount's master proxy: owns the loopback address every RAMDISK mount's
proxy listens on and the nftables rule that keeps everyone but root off it.

Every mfsmount listens on a loopback address (``-o mfsproxy=``, default 127.0.0.1) for
the MooseFS tools and forwards whatever arrives there on its own authenticated session
to the master, as whatever uid the request names (MooseFS's masterproxy.c). It cannot
be switched off. Without a guard, any local user of a node where a RAMDISK is mounted
(its RSA nodes; the job's compute nodes, which other jobs may share) can use it to read
and change the RAMDISK as root without its secret.

So RAMDISK mounts put their proxy on a dedicated loopback address (``PROXY_ADDRESS`` by
default, ``filesystem.moosefs_proxy_address``), and before the first such mount a node
loads one nftables table that rejects connections to that address from any socket not
owned by root (``meta skuid != 0``: locally generated packets pass the output hook with
their socket's owner). Loading is atomic and idempotent (the table is replaced whole;
a compute node, where several jobs' mounts may name different guards, loads the union
of what it guarded before: ``node.mounts.guard_proxy``, :func:`guard_ruleset`).
A node without ``nft`` refuses to mount: an unguarded RAMDISK is never mounted.

The same table keeps everyone but root off the RAMDISKs' servers: MooseFS chunkservers
authenticate nobody (whoever reaches one and guesses a chunk id reads and writes chunks,
bypassing the master's password), so connections from a socket not owned by root to the
RSA nodes' data addresses on the port range RAMDISK servers take are rejected too, on
every node where a RAMDISK is mounted (its RSA nodes, where staging and POSTPROCESS run
as users, and its compute nodes). Only root's mfsmount and the servers themselves (root)
talk to them. rsad hands a compute node those addresses and ports inside the mount argv
as the option ``rsaguard=<ip>+<ip>...@<low>-<high>`` (rsad's, never mfsmount's: the node
takes it out before it mounts).

Pure text here (the ruleset, what an argv names); running ``nft`` is the caller's
(``node.mounts`` on compute nodes as root, ``fs.moosefs`` on RSA nodes over SSH).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rsa_scheduler.errors import RsaError

PROXY_ADDRESS = "127.83.65.1"  # 'S' 'A' in the middle: an address nothing else uses
NFT_TABLE = "rsa_mfsproxy"  # family inet
NFT_FILE = "mfsproxy.nft"  # name of the ruleset file where one is written
GUARD_OPTION = "rsaguard"  # rsad's mount option naming the servers to guard (not mfsmount's)


class ProxyAddressError(RsaError, ValueError):
    """An address the guard refuses to take: the message is for the operator."""


def check_address(address: str) -> str:
    """A loopback IPv4 address other than 127.0.0.1 (which other tools share), as text."""
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError as e:
        raise ProxyAddressError(f"mfsmount proxy address {address!r} is not an IPv4 "
                                "address; use a loopback address such as "
                                f"{PROXY_ADDRESS}") from e
    if not ip.is_loopback or str(ip) == "127.0.0.1":
        raise ProxyAddressError(f"mfsmount proxy address {address} must be a loopback "
                                f"address other than 127.0.0.1, such as {PROXY_ADDRESS}")
    return str(ip)


@dataclass(frozen=True, slots=True)
class Servers:
    """The RSA nodes' data addresses and the port range their RAMDISK servers listen on
    (what the guard keeps everyone but root off)."""

    addresses: tuple[str, ...]
    low: int
    high: int

    def __post_init__(self) -> None:
        for a in self.addresses:
            try:
                ipaddress.IPv4Address(a)
            except ValueError as e:
                raise ProxyAddressError(f"RSA node data address {a!r} is not an IPv4 "
                                        "address") from e
        if not self.addresses:
            raise ProxyAddressError("no RSA node data address to guard")
        if not 1 <= self.low <= self.high <= 65535:
            raise ProxyAddressError(f"port range {self.low}-{self.high} is not one")

    def option(self) -> str:
        """The ``rsaguard=`` mount option naming these servers."""
        return f"{GUARD_OPTION}={'+'.join(self.addresses)}@{self.low}-{self.high}"

    @classmethod
    def parse(cls, value: str) -> Servers:
        """The servers a ``rsaguard=`` option's value names (ProxyAddressError if bad)."""
        addrs, at, ports = value.partition("@")
        low, dash, high = ports.partition("-")
        if not (at and dash and low.isdigit() and high.isdigit()):
            raise ProxyAddressError(f"{GUARD_OPTION}={value!r}: expected "
                                    "<ip>+<ip>...@<low>-<high>")
        return cls(tuple(addrs.split("+")), int(low), int(high))


def ruleset(address: str | None, servers: Servers | None = None) -> str:
    """The nftables text that (re)loads the guard in one transaction: of the proxy
    ``address`` (None: none) and of ``servers`` (None: none)."""
    return guard_ruleset(() if address is None else (address,),
                         () if servers is None else (servers,))


def guard_ruleset(addresses: Iterable[str], servers: Iterable[Servers]) -> str:
    """The table guarding every proxy address of ``addresses`` and every group of
    ``servers`` (a node that loaded several guards keeps them all: the table is
    replaced whole at each load, so each load names everything the node guards)."""
    rules = [f"    ip daddr {a} meta skuid != 0 counter reject with tcp reset\n"
             for a in sorted({check_address(a) for a in addresses})]
    rules += [f"    ip daddr {{ {', '.join(s.addresses)} }} tcp dport {s.low}-{s.high} "
              "meta skuid != 0 counter reject with tcp reset\n"
              for s in sorted(set(servers), key=lambda s: (s.addresses, s.low, s.high))]
    if not rules:
        raise ProxyAddressError("nothing to guard")
    return (f"table inet {NFT_TABLE}\n"
            f"delete table inet {NFT_TABLE}\n"
            f"table inet {NFT_TABLE} {{\n"
            "  chain output {\n"
            "    type filter hook output priority 0; policy accept;\n"
            + "".join(rules) +
            "  }\n"
            "}\n")


def take_servers(argv: Sequence[str]) -> tuple[list[str], Servers | None]:
    """``argv`` without its ``rsaguard=`` option (an ``-o`` left empty goes too), and
    the servers it named (None: none)."""
    out = list(argv)
    mark = f"{GUARD_OPTION}="
    for i, arg in enumerate(out[:-1]):
        if arg != "-o":
            continue
        opts = str(out[i + 1]).split(",")
        found = [o for o in opts if o.startswith(mark)]
        if not found:
            continue
        servers = Servers.parse(found[-1][len(mark):])
        rest = [o for o in opts if not o.startswith(mark)]
        out[i:i + 2] = ["-o", ",".join(rest)] if rest else []
        return out, servers
    return out, None


def proxy_address_of(argv: Sequence[str]) -> str | None:
    """The ``mfsproxy=`` address an mfsmount argv names (``-o`` options or ``-L``), else
    None. An address the guard would not take is a ProxyAddressError."""
    found: str | None = None
    for i, arg in enumerate(argv[:-1]):
        if arg == "-o":
            for opt in str(argv[i + 1]).split(","):
                if opt.startswith("mfsproxy="):
                    found = opt.removeprefix("mfsproxy=")
        elif arg == "-L":
            found = str(argv[i + 1])
    return None if found is None else check_address(found)
