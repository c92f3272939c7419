"""The rsa-scheduler lab: a real Slurm cluster, RSA nodes and a throttled PFS on one host.

Stdlib only, run with /usr/bin/python3 (``lab/labctl``). Owns everything under
/run/rsa-lab and /var/lib/rsa-lab; stops only what it started (pidfiles, namespaces).
"""
