#!/bin/bash
# Lab hook for every Slurm hook: append this hook's environment to
# /run/rsa-lab/hooks.log, then hand over to the SHIPPED hook script (prolog_epilog/, what
# the Debian package installs in /usr/lib/rsa-scheduler/), with the lab's venv as its
# Python: rsa-prolog-slurmctld / rsa-epilog-slurmctld tell rsad; rsa-prolog / rsa-epilog
# mount and unmount the job's RAMDISK. Called through symlinks named after the hook
# (prolog, epilog, prolog_slurmctld, epilog_slurmctld).
# Exit 0 on purpose (a non-zero node Prolog would drain the node), unless a site script
# chained by the shipped hook failed: that status is the site's to give.
hook=$(basename "$0")
log=/run/rsa-lab/hooks.log
dump=$( { echo "=== hook=$hook pid=$$ uid=$(id -u) host=$(hostname) time=$(date +%s.%N)"; env -0 | sort -z | tr '\0' '\n'; echo "=== end $hook"; } )
printf '%s\n' "$dump" >>"$log" 2>/dev/null
repo=$(dirname "$(readlink -f "$0")")/../..
shipped=$repo/prolog_epilog
# the site's own scripts the shipped hooks chain (prolog_epilog/rsa-site-hooks): the
# lab's directory, never the host's /etc/rsa; empty unless a test puts scripts there
# (tests/e2e/test_site_chaining.py)
export RSA_SITE_HOOKS=/run/rsa-lab/site-hooks
case "$hook" in
  prolog_slurmctld|epilog_slurmctld)
    venv=$(sed -n 's/^RSA_LAB_VENV=//p' /run/rsa-lab/env 2>/dev/null)
    venv=${venv:-$repo/.venv}
    if [ -x "$venv/bin/python" ]; then
      RSA_CONFIG=/run/rsa-lab/rsa.yaml RSA_PYTHON="$venv/bin/python" \
        exec "$shipped/rsa-${hook%_slurmctld}-slurmctld"
    fi
    ;;
  prolog|epilog)
    # slurmd reads this script's path at every job: no slurmd restart needed. The lab's
    # PFS (/pfs/home) is an allowed root here; RSA_API + RSA_ALLOWED_ROOTS also spare the
    # hook from parsing the configuration (Prolog latency when there is nothing to do).
    venv=$(sed -n 's/^RSA_LAB_VENV=//p' /run/rsa-lab/env 2>/dev/null)
    venv=${venv:-$repo/.venv}
    # hooks.mounts: node-wide unless /run/rsa-lab/mounts says "job" (private mounts:
    # tests/integration/test_spank.py switches it for its own jobs, read at every job)
    mounts=$(cat /run/rsa-lab/mounts 2>/dev/null || echo node)
    if [ -x "$venv/bin/python" ]; then
      RSA_CONFIG=/run/rsa-lab/rsa.yaml RSA_API=/run/rsa/rsad.sock RSA_MOUNTS="$mounts" \
        RSA_ALLOWED_ROOTS=/pfs/home:/home:/scratch RSA_PROLOG_TIMEOUT=10 RSA_HOOK_TIMEOUT=2 \
        RSA_PYTHON="$venv/bin/python" RSA_PROLOG_BACKSTOP=50 RSA_EPILOG_BACKSTOP=50 \
        "$shipped/rsa-$hook"
      exit $?  # 0 unless a site script failed (rsa-site-hooks): Slurm must see that
    fi
    ;;
esac
exit 0
