"""SshHost against the lab's real sshd on the RSA nodes: argv without a shell, identity
switch, timeouts and cancellation killing the remote tree, connection reuse, host keys."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rsa_scheduler.hosts import Cancelled, CancelToken, HostError
from rsa_scheduler.remote import HostPool, SshHost, remote_argv
from rsa_scheduler.runner import CommandError, Identity
from tests.integration.fskit import lab_hosts


@pytest.fixture(scope="module")
def hosts(lab: Mapping[str, str]) -> Iterator[HostPool]:
    with lab_hosts(lab) as pool:
        yield pool


@pytest.fixture
def rsa1(hosts: HostPool) -> SshHost:
    return hosts["rsa1"]


def _alive(host: SshHost, marker: str) -> list[str]:
    # "[s]leep" so pgrep does not find its own command line
    out = host.run(["pgrep", "-a", "-f", f"[s]leep {marker}"], timeout=10, check=False)
    return out.stdout.splitlines()


def test_runs_argv_on_the_node_without_shell_expansion(hosts: HostPool) -> None:
    for name, host in hosts.items():
        assert host.run(["hostname"], timeout=10).stdout.strip() == name
    done = hosts["rsa1"].run(["echo", "$HOME", ";", "`id`", "'q'"], timeout=10)
    assert done.stdout == "$HOME ; `id` 'q'\n"


def test_input_exit_code_and_stderr(rsa1: SshHost) -> None:
    assert rsa1.run(["cat"], timeout=10, input="data\n").stdout == "data\n"
    with pytest.raises(CommandError) as info:
        rsa1.run(["sh", "-c", "echo boom >&2; exit 3"], timeout=10)
    assert info.value.returncode == 3 and "boom" in info.value.stderr_tail
    assert rsa1.run(["false"], timeout=10, check=False).returncode == 1


def test_as_user_has_the_users_uid_gid_groups_env_and_umask(
        rsa1: SshHost, lab: Mapping[str, str]) -> None:
    who = Identity.of(lab["RSA_LAB_USER"])
    out = rsa1.run(["sh", "-c", "id -u; id -g; id -G; umask; env | sort"], timeout=10,
                   as_user=who, env={"RSA_X": "1"}).stdout.splitlines()
    assert out[0] == str(who.uid) and out[1] == str(who.gid)
    assert sorted(int(g) for g in out[2].split()) == sorted(who.groups)
    assert out[3] == "0077"
    env = dict(line.split("=", 1) for line in out[4:])
    assert env["USER"] == who.user and env["HOME"] == who.home and env["RSA_X"] == "1"
    assert not any(k.startswith("SSH_") for k in env)


def test_user_cannot_read_a_root_only_file(rsa1: SshHost, lab: Mapping[str, str]) -> None:
    path = f"{lab['RSA_LAB_POOL_RAM']}/itest-root-only"  # the RAM pool: root's, 0700
    rsa1.run(["sh", "-c", f"umask 077; echo secret > {path}"], timeout=10)
    try:
        assert rsa1.run(["cat", path], timeout=10).stdout == "secret\n"
        with pytest.raises(CommandError) as info:
            rsa1.run(["cat", path], timeout=10, as_user=Identity.of(lab["RSA_LAB_USER"]))
        assert "Permission denied" in info.value.stderr_tail
    finally:
        rsa1.run(["rm", "-f", path], timeout=10)


def test_timeout_kills_the_whole_remote_tree(rsa1: SshHost) -> None:
    start = time.monotonic()
    with pytest.raises(CommandError, match="timed out") as info:
        rsa1.run(["sh", "-c", "sleep 301 & sleep 302 & wait"], timeout=1)
    assert info.value.timed_out
    assert time.monotonic() - start < 6
    assert _alive(rsa1, "301") == [] and _alive(rsa1, "302") == []


def test_cancel_kills_the_whole_remote_tree(rsa1: SshHost, lab: Mapping[str, str]) -> None:
    token = CancelToken()
    threading.Timer(0.5, token.cancel, args=("demoted",)).start()
    with pytest.raises(Cancelled, match="demoted"):
        rsa1.run(["sh", "-c", "sleep 303 & sleep 304"], timeout=60, cancel=token,
                 as_user=Identity.of(lab["RSA_LAB_USER"]))
    assert _alive(rsa1, "303") == [] and _alive(rsa1, "304") == []
    with pytest.raises(Cancelled):  # an already-cancelled token runs nothing
        rsa1.run(["true"], timeout=10, cancel=token)


def test_a_kill_that_does_not_end_is_given_up_on(rsa1: SshHost) -> None:
    """The kills after a timeout or cancel run as short commands, bounded: a node where
    they hang must not hang the staging step (their exit status used to be awaited for
    ever)."""
    start = time.monotonic()
    with pytest.raises(HostError, match=r"sleep 7 did not end within 1s"):
        rsa1._simple(["sleep", "7"], timeout=1)
    assert time.monotonic() - start < 5
    assert rsa1._simple(["true"]) == 0  # the connection is still good


def test_one_connection_reused_across_threads(lab: Mapping[str, str]) -> None:
    with lab_hosts(lab) as pool:
        host = pool["rsa2"]
        results: list[str] = []

        def work() -> None:
            for _ in range(3):
                results.append(host.run(["hostname"], timeout=20).stdout.strip())

        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == ["rsa2"] * 18
        assert host.connects == 1


def test_reconnects_after_the_connection_drops(rsa1: SshHost) -> None:
    rsa1.run(["true"], timeout=10)
    before = rsa1.connects
    rsa1.close()
    assert rsa1.run(["hostname"], timeout=10).stdout.strip() == "rsa1"
    assert rsa1.connects == before + 1


def test_wrong_known_hosts_is_rejected(lab: Mapping[str, str], tmp_path: Path) -> None:
    # rsa2's key under rsa1's address: a host-key mismatch (the lab's known_hosts names
    # each node "rsaN,ADDRESS", the cluster lab's as ssh-keyscan wrote it: "rsaN")
    address = lab["RSA_LAB_RSA_ADDRESSES"].split(",")[0]
    lines = Path(lab["RSA_LAB_SSH_KNOWN_HOSTS"]).read_text().splitlines()
    rsa2_key = next(line for line in lines
                    if "rsa2" in line.split(None, 1)[0].split(",")).split(None, 1)[1]
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{address} {rsa2_key}\n")
    host = SshHost("rsa1", address, key=lab["RSA_LAB_SSH_KEY"], known_hosts=wrong)
    with pytest.raises(HostError, match="does not match"):
        host.run(["true"], timeout=10)
    empty = tmp_path / "empty"
    empty.write_text("")
    host = SshHost("rsa1", address, key=lab["RSA_LAB_SSH_KEY"], known_hosts=empty)
    with pytest.raises(HostError, match="not in known_hosts"):
        host.run(["true"], timeout=10)
    added = SshHost("rsa1", address, key=lab["RSA_LAB_SSH_KEY"], known_hosts=empty,
                    host_key_policy="auto-add")
    try:
        assert added.run(["hostname"], timeout=10).stdout.strip() == "rsa1"
        assert address in empty.read_text()
    finally:
        added.close()


def test_remote_argv_is_pure_and_quoted() -> None:
    who = Identity("u", 1001, 1001, (1001, 27), "/home/u")
    argv = remote_argv(["ls", "a b"], as_user=who)
    assert argv[:3] == ["setsid", "-w", "sh"]
    assert "--reuid=1001" in argv and "--groups=1001,27" in argv
    assert argv[-2:] == ["ls", "a b"]


def test_output_written_after_the_exit_status_is_not_lost(rsa1: SshHost) -> None:
    # sshd reports the exit status when the command exits; output still in flight from a
    # process that holds its stdout arrives after it (then EOF)
    done = rsa1.run(["sh", "-c", "(sleep 0.3; echo late) &"], timeout=20)
    assert done.stdout == "late\n"


def test_a_daemon_holding_stdout_does_not_hold_the_command(rsa1: SshHost) -> None:
    # EOF never comes while the background sleep lives; the command is still over
    pid = rsa1.run(["sh", "-c", "sleep 60 & echo $!"], timeout=5).stdout.strip()
    rsa1.run(["kill", pid], timeout=10)


def test_keep_holds_only_the_tails_of_a_command_that_prints_without_end(
        rsa1: SshHost) -> None:
    # a user's PRE/POSTPROCESS may print for its whole timeout: rsad held all of it
    # (48 MiB here: ~100 MiB of Python objects) until it ended; now about ``keep`` bytes
    import tracemalloc

    tracemalloc.start()
    try:
        done = rsa1.run(["sh", "-c", "head -c 50331648 /dev/zero | tr '\\0' o; echo end; "
                                     "head -c 50331648 /dev/zero >&2; printf err >&2"],
                        timeout=120, keep=4096)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"held {peak >> 20} MiB of a command's output"
    assert done.returncode == 0 and done.stdout.endswith("oooend\n")
    assert 4096 <= len(done.stdout) <= 2 * 4096 and done.stderr.endswith("\0err")
    assert "RSA-PGID" not in done.stdout


class DroppingProxy:
    """A loopback TCP relay to ``target`` that closes its first ``drop`` connections at
    once, as an sshd over its MaxStartups does (before its banner)."""

    def __init__(self, target: tuple[str, int], drop: int) -> None:
        import socket

        self.target, self.drop, self.accepted = target, drop, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import socket

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.drop:
                conn.close()
                continue
            up = socket.create_connection(self.target)
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: object, b: object) -> None:
        import socket

        assert isinstance(a, socket.socket) and isinstance(b, socket.socket)
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()


def _via(proxy: DroppingProxy, rsa1: SshHost) -> SshHost:
    return SshHost("rsa1", "127.0.0.1", port=proxy.port, user=rsa1.user, key=rsa1.key,
                   host_key_policy="auto-add", connect_timeout=5)


def test_a_connection_sshd_drops_before_its_banner_is_tried_again(rsa1: SshHost) -> None:
    proxy = DroppingProxy((rsa1.address, rsa1.port), drop=2)
    host = _via(proxy, rsa1)
    try:
        assert host.run(["echo", "up"], timeout=30).stdout == "up\n"
        assert proxy.accepted == 3 and host.connects == 1
    finally:
        host.close()
        proxy.close()


def test_an_sshd_that_always_drops_fails_with_a_hint_after_a_few_tries(
        rsa1: SshHost) -> None:
    proxy = DroppingProxy((rsa1.address, rsa1.port), drop=1000)
    host = _via(proxy, rsa1)
    try:
        with pytest.raises(HostError, match="5 tries: is sshd's MaxStartups too low"):
            host.run(["true"], timeout=30)
        assert proxy.accepted == 5
    finally:
        host.close()
        proxy.close()
