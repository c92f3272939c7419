#!/bin/bash
# Lab hook for every Slurm hook: append this hook's environment to
# /run/rsa-lab/hooks.log, then hand over to the product's hook where there is one
# (PrologSlurmctld/EpilogSlurmctld -> rsa-hook, which tells rsad). Called through
# symlinks named after the hook (prolog, epilog, prolog_slurmctld, epilog_slurmctld).
# Exit 0 on purpose: a non-zero node Prolog would drain the node.
hook=$(basename "$0")
log=/run/rsa-lab/hooks.log
dump=$( { echo "=== hook=$hook pid=$$ uid=$(id -u) host=$(hostname) time=$(date +%s.%N)"; env -0 | sort -z | tr '\0' '\n'; echo "=== end $hook"; } )
printf '%s\n' "$dump" >>"$log" 2>/dev/null
case "$hook" in
  prolog_slurmctld|epilog_slurmctld)
    venv=$(sed -n 's/^RSA_LAB_VENV=//p' /run/rsa-lab/env 2>/dev/null)
    venv=${venv:-$(dirname "$(readlink -f "$0")")/../../.venv}
    if [ -x "$venv/bin/rsa-hook" ]; then
      RSA_CONFIG=/run/rsa-lab/rsa.yaml exec "$venv/bin/rsa-hook" "$hook"
    fi
    ;;
esac
exit 0
