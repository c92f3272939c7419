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
their socket's owner). Loading is atomic and idempotent (the table is replaced whole).
A node without ``nft`` refuses to mount: an unguarded RAMDISK is never mounted.

Pure text here (the ruleset, what an argv names); running ``nft`` is the caller's
(``node.mounts`` on compute nodes as root, ``fs.moosefs`` on RSA nodes over SSH).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from rsa_scheduler.errors import RsaError

PROXY_ADDRESS = "127.83.65.1"  # 'S' 'A' in the middle: an address nothing else uses
NFT_TABLE = "rsa_mfsproxy"  # family inet
NFT_FILE = "mfsproxy.nft"  # name of the ruleset file where one is written


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


def ruleset(address: str) -> str:
    """The nftables text that (re)loads the guard for ``address`` in one transaction."""
    addr = check_address(address)
    return (f"table inet {NFT_TABLE}\n"
            f"delete table inet {NFT_TABLE}\n"
            f"table inet {NFT_TABLE} {{\n"
            "  chain output {\n"
            "    type filter hook output priority 0; policy accept;\n"
            f"    ip daddr {addr} meta skuid != 0 counter reject with tcp reset\n"
            "  }\n"
            "}\n")


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
