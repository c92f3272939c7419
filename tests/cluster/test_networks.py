"""The cluster lab's networks, as a site has them (issue 30): management (Slurm, SSH,
rsad's API, the directory), the RSA data network (the RAMDISKs' servers and clients:
compute and RSA nodes only) and storage (the PFS). A login node reaches slurmctld, rsad
and the PFS, and not the RSA data network: it has no address on it nor a route to it,
and an RSA node takes its data addresses from the data network alone (the operator
guide's firewall, loaded on rsa1 and rsa2), so a route root adds on the login node
through an RSA node's management address gets nowhere either."""

from __future__ import annotations

from tests.cluster.conftest import Cluster

# a real connection attempt: "connected", or the error's name and errno
PROBE = """import socket, sys
s = socket.socket(); s.settimeout(float(sys.argv[3]))
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("connected")
except OSError as e:
    print(type(e).__name__, e.errno)
"""
RSA1_DATA = "10.231.0.21"  # rsa1's address on the RSA data network (sshd listens there)


def probe(cluster: Cluster, node: str, addr: str, port: int, *, user: str | None = None,
          wait: float = 1.0) -> str:
    return cluster.out(node, ["python3", "-c", PROBE, addr, str(port), str(wait)],
                       user=user).strip()


def test_the_login_node_reaches_slurm_and_the_pfs_not_the_rsa_data_network(
        cluster: Cluster) -> None:
    # management: slurmctld and rsad's API, as a user of the login node
    assert "UP" in cluster.out("login", ["scontrol", "ping"], user="rsaother")
    assert cluster.run("login", ["rsa", "status"], user="rsaother").returncode == 0
    # storage: the login node's own client of the PFS, its master on the storage network
    assert cluster.out("login", ["findmnt", "-n", "-o", "SOURCE", "/pfs"]).strip() == \
        "mfs#pfs-st:9421"
    assert "rsaother" in cluster.out("login", ["ls", "/pfs/home"], user="rsaother").split()
    # the RSA data network: a compute node reaches rsa1 there (control) ...
    assert probe(cluster, "c1", RSA1_DATA, 22, user="rsaother") == "connected"
    # ... the login node has no way to it: no address there, no route
    assert "10.231." not in cluster.out("login", ["ip", "-o", "addr"])
    assert probe(cluster, "login", RSA1_DATA, 22, user="rsaother") == "OSError 101"
    # root on the login node routes it through rsa1's management address: rsa1's firewall
    # drops what comes for its data address from another network
    cluster.run("login", ["ip", "route", "add", "10.231.0.0/24", "via", "10.230.0.21"])
    try:
        assert probe(cluster, "login", RSA1_DATA, 22) == "TimeoutError None"
        table = cluster.out("rsa1", ["nft", "list", "table", "inet", "rsa_data_net"])
        rule = next(line for line in table.splitlines() if "ip daddr" in line)
        assert int(rule.split("packets")[1].split()[0]) > 0, table  # dropped there
    finally:
        cluster.run("login", ["ip", "route", "del", "10.231.0.0/24"])
