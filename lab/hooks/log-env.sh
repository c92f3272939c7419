#!/bin/bash
# Lab placeholder for every Slurm hook: append this hook's environment to
# /run/rsa-lab/hooks.log and succeed. Called through symlinks named after the hook
# (prolog, epilog, prolog_slurmctld, epilog_slurmctld). Exit 0 on purpose: a non-zero
# node Prolog would drain the node. The product's real hooks replace these via
# lab/hooks.conf.
hook=$(basename "$0")
log=/run/rsa-lab/hooks.log
dump=$( { echo "=== hook=$hook pid=$$ uid=$(id -u) host=$(hostname) time=$(date +%s.%N)"; env -0 | sort -z | tr '\0' '\n'; echo "=== end $hook"; } )
printf '%s\n' "$dump" >>"$log" 2>/dev/null
exit 0
