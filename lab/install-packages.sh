#!/usr/bin/env bash
# Install the Debian packages listed in lab/packages.txt that are missing (apt only).
# Idempotent: does nothing (and no apt-get update) when everything is present.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t pkgs < <(grep -v '^\s*#' "$here/packages.txt" | awk 'NF {print $1}')
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "lab: apt installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Debian's maintainer scripts try to start daemons; PID 1 is not systemd and the lab
# starts its own instances, so forbid service starts during the install.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
