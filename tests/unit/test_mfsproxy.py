"""The guard on mfsmount's master proxy (rsa_scheduler/fs/mfsproxy.py): the address
rules, what an argv names, the node side refusing to mount unguarded, and the ruleset
loaded for real by nft in a network namespace of the test's own, where root still
connects to the proxy address and another user is refused."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rsa_scheduler.fs import mfsproxy
from rsa_scheduler.node import mounts


@pytest.mark.parametrize("bad", ["127.0.0.1", "10.0.0.1", "::1", "localhost", "127.0.0.300",
                                 ""])
def test_only_a_dedicated_loopback_address_is_taken(bad: str) -> None:
    with pytest.raises(mfsproxy.ProxyAddressError):
        mfsproxy.check_address(bad)


def test_the_default_address_is_loopback_and_not_the_tools_one() -> None:
    assert mfsproxy.check_address(mfsproxy.PROXY_ADDRESS) == "127.83.65.1"


def test_what_an_argv_names() -> None:
    base = ["mfsmount", "/m", "-H", "10.0.0.5", "-P", "22946"]
    assert mfsproxy.proxy_address_of(base) is None
    assert mfsproxy.proxy_address_of([*base, "-o", "nosuid,mfsproxy=127.83.65.1"]) == \
        "127.83.65.1"
    assert mfsproxy.proxy_address_of([*base, "-L", "127.9.9.9"]) == "127.9.9.9"
    with pytest.raises(mfsproxy.ProxyAddressError):  # never a rule against a real host
        mfsproxy.proxy_address_of([*base, "-o", "mfsproxy=10.0.0.7"])


def test_the_ruleset_replaces_the_table_whole() -> None:
    text = mfsproxy.ruleset("127.83.65.1")
    lines = text.splitlines()
    assert lines[:2] == ["table inet rsa_mfsproxy", "delete table inet rsa_mfsproxy"]
    assert "ip daddr 127.83.65.1 meta skuid != 0 counter reject with tcp reset" in text


def test_a_node_without_nft_refuses_to_mount(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    argv = ["mfsmount", "/m", "-o", "mfsproxy=127.83.65.1"]
    with pytest.raises(mounts.MountError, match="nft not found; install nftables"):
        mounts.guard_proxy(argv, timeout=5)
    mounts.guard_proxy(["mfsmount", "/m", "-o", "nosuid"], timeout=5)  # nothing to guard
    with pytest.raises(mounts.MountError, match="refusing the RAMDISK mount"):
        mounts.guard_proxy(["mfsmount", "/m", "-o", "mfsproxy=8.8.8.8"], timeout=5)


PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except OSError as e:
    print("refused", e.errno)
"""



def in_own_netns(script: str) -> subprocess.CompletedProcess[str]:
    """``script`` (sh, PROBE as $1) in a network namespace of its own; it must succeed."""
    done = subprocess.run(["unshare", "--net", "sh", "-c", script, "sh", PROBE],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done

def _nft_or_skip() -> str:
    nft = shutil.which("nft", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))
    if os.geteuid() != 0 or nft is None or shutil.which("unshare") is None:
        reason = "needs root, nft (apt-get install nftables) and unshare"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return nft


def test_the_guard_keeps_other_users_off_the_proxy_address(tmp_path: Path) -> None:
    """In a fresh network namespace (nothing else sees it): before the guard every user
    connects to a listener on the proxy address; after loading it twice (idempotent),
    root still does, `nobody` is refused."""
    nft = _nft_or_skip()
    rules = tmp_path / "guard.nft"
    rules.write_text(mfsproxy.ruleset(mfsproxy.PROXY_ADDRESS))
    script = f"""
set -e
ip link set lo up
{sys.executable} -c '
import socket, subprocess, sys
s = socket.socket(); s.bind(("{mfsproxy.PROXY_ADDRESS}", 0)); s.listen(8)
port = str(s.getsockname()[1])
def probe(user):
    argv = ["/usr/bin/python3", "-c", sys.argv[1], "{mfsproxy.PROXY_ADDRESS}", port]
    if user != "root":
        argv = ["runuser", "-u", user, "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True).stdout.strip()
print("before", probe("root"), "|", probe("nobody"))
for _ in range(2):
    subprocess.run(["{nft}", "-f", "{rules}"], check=True)
print("after", probe("root"), "|", probe("nobody"))
' "$1"
"""
    done = in_own_netns(script)
    lines = done.stdout.splitlines()
    assert lines == ["before connected | connected", "after connected | refused 111"], lines


def test_the_backend_puts_every_mount_behind_the_guard() -> None:
    from rsa_scheduler.fs.base import FsRequest
    from rsa_scheduler.fs.moosefs import MooseFsBackend

    class Host:
        name = "rsa1"

    backend = MooseFsBackend({"rsa1": Host(), "rsa2": Host()},  # type: ignore[dict-item]
                             addresses={"rsa1": "10.0.0.5", "rsa2": "10.0.0.6"})
    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1", "rsa2"), tier="ram",
                    pool_dirs={"rsa1": "/pool", "rsa2": "/p2"}, mount_root="/mnt")
    lay = backend.layout(req, base=22944, secret="ab" * 16)
    assert f"mfsproxy={mfsproxy.PROXY_ADDRESS}" in backend.client_options
    servers = mfsproxy.Servers(("10.0.0.5", "10.0.0.6"), 20000, 29983)
    assert backend.servers() == servers
    for node in ("rsa1", "rsa2"):
        assert lay.files(node)[mfsproxy.NFT_FILE] == \
            mfsproxy.ruleset(mfsproxy.PROXY_ADDRESS, servers)
        argv = lay.mount_argv(node, backend.rsa_node_options)
        assert mfsproxy.proxy_address_of(argv) == mfsproxy.PROXY_ADDRESS
        guard = lay.guard_argv(node)
        assert guard[-1].endswith(f"/rsa-mfs-job1-c1/{mfsproxy.NFT_FILE}")
    off = MooseFsBackend({"rsa1": Host()}, proxy_address=None,  # type: ignore[dict-item]
                         addresses={"rsa1": "10.0.0.5"})
    assert not any(o.startswith("mfsproxy=") for o in off.client_options)
    one = FsRequest(fs_id="j-c1", job_id="1", nodes=("rsa1",), tier="ram",
                    pool_dirs={"rsa1": "/p"}, mount_root="/mnt")
    # without the proxy guard the servers are still guarded
    assert off.layout(one, base=22944, secret="ab" * 16).guard == mfsproxy.ruleset(
        None, mfsproxy.Servers(("10.0.0.5",), 20000, 29983))


# -- the RAMDISK servers (MooseFS chunkservers authenticate nobody) ----------------------

def test_the_servers_option_round_trips_and_refuses_what_is_not_an_address() -> None:
    servers = mfsproxy.Servers(("10.0.0.5", "10.0.0.6"), 20000, 29983)
    assert servers.option() == "rsaguard=10.0.0.5+10.0.0.6@20000-29983"
    assert mfsproxy.Servers.parse(servers.option().partition("=")[2]) == servers
    for bad in ["10.0.0.5", "10.0.0.5@20000", "10.0.0.5@a-b", "host@1-2",
                "10.0.0.5;drop@1-2", "10.0.0.5@9-8", "@1-2", "10.0.0.5@0-70000"]:
        with pytest.raises(mfsproxy.ProxyAddressError):
            mfsproxy.Servers.parse(bad)


def test_the_node_takes_the_servers_out_of_the_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["mfsmount", "/m", "-H", "10.0.0.5", "-o",
            "nosuid,rsaguard=10.0.0.5@20000-29983,mfspassword=x"]
    out, servers = mfsproxy.take_servers(argv)
    assert out == ["mfsmount", "/m", "-H", "10.0.0.5", "-o", "nosuid,mfspassword=x"]
    assert servers == mfsproxy.Servers(("10.0.0.5",), 20000, 29983)
    alone, _ = mfsproxy.take_servers(["mfsmount", "/m", "-o", "rsaguard=10.0.0.5@1-2"])
    assert alone == ["mfsmount", "/m"]
    loaded: list[str] = []
    monkeypatch.setattr(mounts, "run", lambda argv, input, timeout: loaded.append(input))
    monkeypatch.setattr(shutil, "which", lambda *a, **k: "/usr/sbin/nft")
    assert mounts.guard_proxy(argv, timeout=5) == out  # mfsmount never sees rsaguard=
    assert loaded == [mfsproxy.ruleset(None, servers)]
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    with pytest.raises(mounts.MountError, match="nft not found"):  # never unguarded
        mounts.guard_proxy(argv, timeout=5)
    with pytest.raises(mounts.MountError, match="refusing the RAMDISK mount"):
        mounts.guard_proxy(["mfsmount", "/m", "-o", "rsaguard=evil@1-2"], timeout=5)


def test_the_guard_keeps_other_users_off_the_ramdisk_servers(tmp_path: Path) -> None:
    """In a fresh network namespace: listeners on an RSA node's data address, one in the
    servers' port range, one outside it. Before the guard `nobody` connects to both;
    after it, root still connects to both and `nobody` only to the one outside (the
    guard takes nothing else from users)."""
    nft = _nft_or_skip()
    servers = mfsproxy.Servers(("10.77.0.1",), 20000, 29983)
    rules = tmp_path / "guard.nft"
    rules.write_text(mfsproxy.ruleset(mfsproxy.PROXY_ADDRESS, servers))
    script = f"""
set -e
ip link set lo up
ip addr add 10.77.0.1/32 dev lo
{sys.executable} -c '
import socket, subprocess, sys
socks = []
for port in (20005, 30005):
    s = socket.socket(); s.bind(("10.77.0.1", port)); s.listen(8); socks.append(s)
def probe(user, port):
    argv = ["/usr/bin/python3", "-c", sys.argv[1], "10.77.0.1", str(port)]
    if user != "root":
        argv = ["runuser", "-u", user, "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True).stdout.strip()
def row(when):
    print(when, *(probe(u, p) for u in ("root", "nobody") for p in (20005, 30005)), sep=" | ")
row("before")
subprocess.run(["{nft}", "-f", "{rules}"], check=True)
row("after")
' "$1"
"""
    done = in_own_netns(script)
    assert done.stdout.splitlines() == [
        "before | connected | connected | connected | connected",
        "after | connected | connected | refused 111 | connected"], done.stdout


def test_every_jobs_prolog_loads_the_table_a_mount_loads() -> None:
    # a compute node that never mounted a RAMDISK (a plain job's) gets the same table
    # from its Prolog: its users are kept off every RSA node's servers too
    from rsa_scheduler.fs.moosefs import MooseFsBackend

    class Host:
        name = "rsa1"

    backend = MooseFsBackend({"rsa1": Host(), "rsa2": Host()},  # type: ignore[dict-item]
                             addresses={"rsa1": "10.0.0.5", "rsa2": "10.0.0.6"})
    guard = backend.node_guard()
    argv, servers = mfsproxy.take_servers(["mfsmount", "-o", guard])
    assert servers == backend.servers()
    assert mfsproxy.ruleset(mfsproxy.proxy_address_of(argv), servers) == \
        mfsproxy.ruleset(mfsproxy.PROXY_ADDRESS, backend.servers())
    off = MooseFsBackend({"rsa1": Host()}, proxy_address=None,  # type: ignore[dict-item]
                         addresses={"rsa1": "10.0.0.5"})
    assert off.node_guard() == "rsaguard=10.0.0.5@20000-29983"


def test_a_load_never_drops_what_an_earlier_load_on_the_node_guarded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every load replaces the table whole. Two jobs on one node whose mounts name
    different guards (a RAMDISK built before the proxy address was set or changed, the
    RSA pool changed between two builds): on the code before, the second load's table
    had only its own rules, and the first job's mfsmount proxy (or its servers) was open
    to every local user again. Each load now keeps what the node guarded before."""
    loaded: list[str] = []
    monkeypatch.setattr(mounts, "run", lambda argv, input, timeout: loaded.append(input))
    monkeypatch.setattr(shutil, "which", lambda *a, **k: "/usr/sbin/nft")
    a = mfsproxy.Servers(("10.0.0.5",), 20000, 29983)
    b = mfsproxy.Servers(("10.0.0.5", "10.0.0.6"), 20000, 29983)
    first = ["mfsmount", "/m", "-o", f"mfsproxy=127.83.65.1,{a.option()}"]
    later = ["mfsmount", "/m", "-o", f"mfsproxy=127.83.65.2,{b.option()}"]
    older = ["mfsmount", "/m", "-o", f"nosuid,{a.option()}"]  # a spec without a proxy
    for argv in (first, later, older):
        mounts.guard_proxy(argv, timeout=5, keep=tmp_path / "node")
    assert loaded[0] == mfsproxy.ruleset("127.83.65.1", a)
    for text in loaded[1:]:
        for rule in ("ip daddr 127.83.65.1 meta skuid", "ip daddr 127.83.65.2 meta skuid",
                     "ip daddr { 10.0.0.5 } tcp dport 20000-29983",
                     "ip daddr { 10.0.0.5, 10.0.0.6 } tcp dport 20000-29983"):
            assert rule in text, (rule, text)
    assert loaded[2] == loaded[1]  # nothing new: the same table
    assert stat.S_IMODE((tmp_path / "node" / mounts.GUARD_FILE).stat().st_mode) == 0o600


def test_two_guards_loaded_one_after_the_other_both_hold(tmp_path: Path) -> None:
    """With nft, in a network namespace of the test's own: a mount naming one proxy
    address, then another naming a second (and servers): `nobody` is refused at both
    proxies and at the servers, root reaches them all."""
    _nft_or_skip()
    keep = tmp_path / "node"
    script = f"""
set -e
ip link set lo up
ip addr add 10.77.0.1/32 dev lo
{sys.executable} -c '
import socket, subprocess, sys
from pathlib import Path
sys.path.insert(0, "{Path(__file__).resolve().parents[2]}")
from rsa_scheduler.node import mounts
socks = []
for host, port in (("127.83.65.1", 20001), ("127.83.65.2", 20002), ("10.77.0.1", 20005)):
    s = socket.socket(); s.bind((host, port)); s.listen(8); socks.append(s)
def probe(user, host, port):
    argv = ["/usr/bin/python3", "-c", sys.argv[1], host, str(port)]
    if user != "root":
        argv = ["runuser", "-u", user, "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True).stdout.strip()
mounts.guard_proxy(["mfsmount", "/m", "-o", "mfsproxy=127.83.65.1"], timeout=10,
                   keep=Path("{keep}"))
mounts.guard_proxy(["mfsmount", "/m", "-o", "mfsproxy=127.83.65.2,rsaguard=10.77.0.1@20000-20010"],
                   timeout=10, keep=Path("{keep}"))
for user in ("root", "nobody"):
    print(user, *(probe(user, h, p) for h, p in (("127.83.65.1", 20001),
          ("127.83.65.2", 20002), ("10.77.0.1", 20005))), sep=" | ")
' "$1"
"""
    done = in_own_netns(script)
    assert done.stdout.splitlines() == [
        "root | connected | connected | connected",
        "nobody | refused 111 | refused 111 | refused 111"], done.stdout
