# rsa-scheduler — developer and CI entry points.
#   make test   install everything the tests need (Debian 12, as root) and run them
#   make lint   ruff, mypy, import-linter only
#   make grammar  regenerate the directive grammar's tables in slurm_plugins/rsa_grammar.lua
#                 (job_submit.lua loads it) and the SPANK plugin from
#                 rsa_scheduler/core/grammar.py (a unit test fails when stale)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON_SYS ?= /usr/bin/python3
VENV       ?= $(CURDIR)/.venv
PY         := $(VENV)/bin/python
# Debian packages the unit tests and tools need; the lab adds its own in lab/packages.txt.
# gcc, make, libc6-dev, libslurm-dev build the SPANK plugin; slurm-client gives the unit
# tests a real sbatch to load it into (no daemon is started or contacted). nftables: the
# mfsmount proxy guard, loaded for real in a network namespace of the unit tests' own.
# util-linux-extra: fincore (the verify read-back tests see what left the page cache).
APT_PKGS   := python3-venv python3-dev lua5.1 lua5.4 sqlite3 tmux rsync tar munge libmunge2 groff-base \
              gcc make libc6-dev libslurm-dev slurm-client nftables util-linux-extra
SPANK      := slurm_plugins/spank

# A workflow manager in a venv of its own (not the package's: its dependencies stay out of
# ours), for the lab test of a pipeline of RSA jobs (tests/e2e/test_workflow.py): Snakemake
# with its cluster-generic executor, the one whose status command rsa wait --cluster-status
# answers (docs/user-guide.md "Workflow managers").
WF_VENV    ?= $(CURDIR)/.venv-wf
WF_PKGS    := snakemake==9.27.1 snakemake-executor-plugin-cluster-generic==1.0.9

.PHONY: install test lanes lane-cluster-whole lane-unit lane-queue lane-e2e lane-integration lane-security lane-variant lane-tiers lane-chaos lane-native lane-roots lane-cluster lab-host unit lint clean spank deb install-test install-test-run debootstrap grammar mfs4-test \
        slurm24-test slurm26-test cluster-test cluster-run test-compat cluster-run-whole \
        cluster-run-12 cluster-run-13 cluster-run-testing cluster-lab-test cluster-demo \
        cluster-lab-run release-debs chaos-cluster

install: $(VENV)/.installed spank $(WF_VENV)/.installed

$(WF_VENV)/.installed: $(VENV)/.installed Makefile
	$(PYTHON_SYS) -m venv $(WF_VENV)
	$(WF_VENV)/bin/pip install -q --disable-pip-version-check $(WF_PKGS)
	touch $@

# The SPANK plugin (slurm_plugins/spank/rsa_spank.so, -Werror); the lab copies it at lab-up.
spank: $(VENV)/.installed
	$(MAKE) --no-print-directory -s -C $(SPANK)

$(VENV)/.installed: pyproject.toml Makefile
	@missing=$$(for p in $(APT_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	$(PYTHON_SYS) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

grammar: $(VENV)/.installed
	$(PY) -m rsa_scheduler.grammargen

lint: install
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check rsa_scheduler tests bench lab
	$(VENV)/bin/mypy rsa_scheduler tests bench
	$(VENV)/bin/mypy lab  # alone: the lab's package is rsalab, imported from lab/

unit: install
	$(VENV)/bin/pytest -q -m unit tests/unit

# make test runs lint, then what needs the network (the lab's Debian packages, the .debs'
# build tools, debootstrap, the lab host's root and venvs: apt on the host, never at
# once), then the unit tests (alone: they are CPU-bound, and fail fast), then five lanes
# side by side:
#   queue   the tier phase, the queue-mode phase's integration tests, the security
#           tier, the variant (a second Slurm set-up) and one chaos round, each on a
#           cluster lab of its own (lane-tiers, lane-integration, lane-security,
#           lane-variant, lane-chaos)
#   e2e     the queue-mode phase's whole lifecycles, tests/e2e, on a cluster lab of its
#           own (RSA_CLUSTER_NAME=e2e: every node its own host, the host lab's shape;
#           cluster-lab-run); make lab-test LAB_TESTS=tests/e2e runs them on the host lab
#   native  the native-mode phase (tests/e2e in native mode) on a cluster lab of its own
#   roots   the install test, MooseFS 4, Slurm 24.11 and 26.05, each in roots and
#           namespaces of its own
#   cluster the cluster lab (lab/cluster: every node its own host): the whole suite on
#           RSA_LAB_DEBIAN, the compatibility set on the two other releases (issue 31),
#           one after the other (one cluster lab at a time)
# The unit tests and each lab phase run in a sandbox of their own (lab/sandbox: a host of
# its own, its own network, /run, /etc, cgroups; booted from RSA_LAB_DEBIAN's root, below,
# for the lab phases), so that the labs cannot reach each
# other or a lab of this host's (a unit test that would fence a running lab's cgroups, a
# port in use). Each lane's phases stop at its first failure; every lane runs to its end.
# Each lane's output is kept in dist/lane-NAME.log and shown at the end, with its time;
# the first failing lane's status is make test's. The lab phases mostly wait on Slurm's
# and MooseFS's own clocks, so lanes side by side save most of what they add up to
# (docs/lab.md, "Measured times": where make test's time goes).
ROOTS_TESTS := install-test-run mfs4-test slurm24-test slurm26-test
LANES := queue e2e native roots cluster
test: install lint
	lab/install-packages.sh
	$(MAKE) --no-print-directory deb
	$(MAKE) --no-print-directory debootstrap
	$(MAKE) --no-print-directory lab-host
	$(MAKE) --no-print-directory release-debs
	$(MAKE) --no-print-directory lane-unit
	$(MAKE) --no-print-directory lanes LANES='$(LANES)' RELEASE_DEBS=built

# The lanes named in LANES, side by side (make test, make test-compat).
lanes:
	@mkdir -p dist; rm -f dist/lane-*.log dist/lane-*.rc; pids=; \
	for lane in $(LANES); do \
	  ( s=$$(date +%s); rc=0; $(MAKE) --no-print-directory lane-$$lane >dist/lane-$$lane.log 2>&1 || rc=$$?; \
	    echo $$rc >dist/lane-$$lane.rc; \
	    echo "lane $$lane: rc $$rc, $$(( $$(date +%s) - s )) s" >>dist/lane-$$lane.log ) & pids="$$pids $$!"; \
	done; \
	trap 'kill $$pids 2>/dev/null; wait; exit 130' INT TERM; \
	wait; rc=0; \
	for lane in $(LANES); do \
	  echo "---- lane $$lane: dist/lane-$$lane.log"; cat dist/lane-$$lane.log; \
	done; \
	for lane in $(LANES); do \
	  lrc=$$(cat dist/lane-$$lane.rc 2>/dev/null || echo 1); tail -n1 dist/lane-$$lane.log; \
	  [ "$$lrc" = 0 ] || { echo "make test: lane $$lane failed"; [ $$rc -ne 0 ] || rc=$$lrc; }; \
	done; \
	exit $$rc

# the unit tests on RSA_LAB_DEBIAN's Python and libraries (Debian 12's: make install-test)
lane-unit: lab-host
	$(LAB_SANDBOX) unit $(LAB_VENV)/bin/pytest -q -p no:cacheprovider tests/unit

# The Debian release make test's labs run on (issue 31; docs/lab.md "Debian releases"):
# RSA_LAB_DEBIAN, 13 (Slurm 24.11, MooseFS 4.57: what a centre installs today, the
# default), 12 (Slurm 22.05, MooseFS 3.0) or testing (Slurm 26.05, MooseFS 4.59). The lab
# phases' sandboxes boot lab/host-root's root of that release with its venvs (12: this
# host's own root); the cluster lab runs its whole suite on it, the compatibility set on
# the two others.
RSA_LAB_DEBIAN ?= 13
ifeq ($(RSA_LAB_DEBIAN),12)
LAB_SANDBOX := lab/sandbox
LAB_VENV    := $(VENV)
LAB_VARS    :=
else
LAB_SANDBOX  = RSA_SANDBOX_ROOT=$$(lab/host-root $(RSA_LAB_DEBIAN)) lab/sandbox
LAB_VENV    := $(CURDIR)/.venv-debian$(RSA_LAB_DEBIAN)
LAB_VARS    := VENV=$(LAB_VENV) WF_VENV=$(CURDIR)/.venv-wf-debian$(RSA_LAB_DEBIAN)
endif
LAB_IN       = $(LAB_SANDBOX) $(1) $(MAKE) --no-print-directory $(LAB_VARS)

lab-host: install
	$(if $(filter-out 12,$(RSA_LAB_DEBIAN)),lab/host-root $(RSA_LAB_DEBIAN) >/dev/null)

lane-queue: lab-host
	$(MAKE) --no-print-directory lane-tiers
	$(MAKE) --no-print-directory lane-integration
	$(MAKE) --no-print-directory lane-security
	$(MAKE) --no-print-directory lane-variant
	$(MAKE) --no-print-directory lane-chaos

lane-e2e: lab-host
	$(MAKE) --no-print-directory cluster-lab-run RSA_CLUSTER_NAME=e2e \
	  CLUSTER_LAB_TESTS='tests/e2e --durations=20'

# tests/integration on a cluster lab of its own (RSA_CLUSTER_NAME=integ; the ssd tier's
# tests and the ones needing faketime or tmux skip there, saying why), as lane-e2e runs
# tests/e2e; make lab-test LAB_TESTS=tests/integration runs the tier on the host lab
lane-integration: lab-host
	$(MAKE) --no-print-directory cluster-lab-run RSA_CLUSTER_NAME=integ \
	  CLUSTER_LAB_TESTS='tests/integration --durations=20'

# tests/security on a cluster lab of its own (RSA_CLUSTER_NAME=sec: rsaother attacks from
# the login node and the compute nodes, tests/security/where.py), as lane-e2e runs
# tests/e2e (make lab-test LAB_TESTS=tests/security runs the tier on the host lab)
lane-security: lab-host
	$(MAKE) --no-print-directory cluster-lab-run RSA_CLUSTER_NAME=sec \
	  CLUSTER_LAB_TESTS='tests/security --durations=20'

# The second Slurm set-up (lab-test-variant's: no slurmdbd, so rsad locks in by priority;
# PrologFlags=Alloc,Contain: the Prolog at allocation on every node, the extern step) on a
# cluster lab of its own (RSA_CLUSTER_NAME=variant): the tests marked prologflags or
# lockin (make lab-test-variant runs them on the host lab)
lane-variant: lab-host
	RSA_CLUSTER_ACCOUNTING=0 RSA_CLUSTER_PROLOG_FLAGS=Alloc,Contain \
	  $(MAKE) --no-print-directory cluster-lab-run RSA_CLUSTER_NAME=variant \
	  CLUSTER_LAB_TESTS='$(VARIANT_TESTS)'

# The tier phase (lab-test-tiers' tests: rsa1-2 in the ram tier, rsa3-4 in the ssd tier on
# capped loop devices) on a cluster lab of its own (RSA_CLUSTER_NAME=tiers,
# RSA_CLUSTER_TIERS=mixed: lab/cluster/ssdpool.py)
lane-tiers: lab-host
	RSA_CLUSTER_TIERS=mixed $(MAKE) --no-print-directory cluster-lab-run \
	  RSA_CLUSTER_NAME=tiers CLUSTER_LAB_TESTS='$(TIERS_TESTS)'

# One chaos round (tests/chaos: rsad, slurmctld, an RSA node's sshd and a RAMDISK's
# servers killed on the hosts that run them) on a cluster lab of its own
# (RSA_CLUSTER_NAME=chaos), the last phase of lane-queue. `make chaos-cluster N=20
# [SEED=123]` runs N rounds there (make chaos: on the host lab).
lane-chaos: lab-host
	$(MAKE) --no-print-directory cluster-lab-run RSA_CLUSTER_NAME=chaos \
	  CLUSTER_LAB_TESTS='tests/chaos -s'

chaos-cluster: lab-host deb
	$(MAKE) --no-print-directory release-debs
	RSA_CHAOS_ROUNDS=$(N) RSA_CHAOS_SEED=$(SEED) $(MAKE) --no-print-directory lane-chaos

# RSA_LAB_DEBIAN's packages (lab/deb-release; Debian 12's are make deb's), built once
# before the lanes: two lanes boot cluster labs from that release's image, which a
# package built anew in one lane would rebuild under the other's running nodes
# (RELEASE_DEBS=built then keeps the cluster targets from building them again)
release-debs:
	$(if $(filter-out 12,$(RSA_LAB_DEBIAN)),lab/deb-release $(RSA_LAB_DEBIAN))

# The native-mode phase, tests/e2e with Slurm's burst_buffer/lua driving rsad, on a
# cluster lab of its own (RSA_CLUSTER_NAME=native, switched to native mode; the host
# lab's shape), PollInterval 5 s as the host lab's (Slurm's default, 15 s, makes every
# stage-in and stage-out up to 15 s longer: the phase took 41 min with it, 25 with 5;
# Slurm 22.05 has no PollInterval, its data_in blocks)
lane-native: lab-host
	$(if $(filter-out 12,$(RSA_LAB_DEBIAN)),RSA_CLUSTER_BB_POLL=5) $(MAKE) --no-print-directory cluster-lab-run \
	  RSA_CLUSTER_NAME=native CLUSTER_LAB_MODE=native CLUSTER_LAB_TESTS='$(NATIVE_TESTS)'


lane-roots lane-cluster: install
	@rc=0; for t in $(if $(filter lane-roots,$@),$(ROOTS_TESTS),$(CLUSTER_RUNS)); do \
	  s=$$(date +%s); src=0; $(MAKE) --no-print-directory $$t || src=$$?; \
	  echo "$@ $$t: rc $$src, $$(( $$(date +%s) - s )) s"; \
	  [ $$src = 0 ] || { echo "make test: $$t failed"; [ $$rc -ne 0 ] || rc=$$src; }; \
	done; exit $$rc

# The Debian packages, built with Debian's own tooling (debhelper, pybuild) from a clean
# copy of the tree (tracked files and new ones not ignored), into dist/:
#   dist/rsa-scheduler_<version>_all.deb, dist/rsa-scheduler-spank_<version>+slurm<X.Y>_<arch>.deb
# (the SPANK package's version names the Slurm release it is built for: debian/rules);
# the packages of an earlier make deb go first, so dist/ holds one of each
DEB_PKGS := debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools \
            libslurm-dev gcc make
VERSION  := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
deb:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	rm -rf dist/build && mkdir -p dist/build/rsa-scheduler-$(VERSION)
	git ls-files -z --cached --others --exclude-standard | \
	  xargs -0 -I{} sh -c 'test -e "{}" -o -L "{}" && echo "{}"' | \
	  tar -cf - -T - | tar -xf - -C dist/build/rsa-scheduler-$(VERSION)
	cd dist/build/rsa-scheduler-$(VERSION) && env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	  HOME=/nonexistent LC_ALL=C.UTF-8 dpkg-buildpackage -us -uc -b >../build.log 2>&1 || \
	  { tail -40 ../build.log; exit 1; }
	rm -f dist/rsa-scheduler*.deb
	mv dist/build/*.deb dist/
	@ls -1 dist/*.deb

# The packages on a fresh machine: a clean Debian 12 root (debootstrap), apt-get install
# of dist/*.deb with Debian's own dependencies, then what an operator runs first and the
# unit tests on Debian's library versions (tests/install/run).
install-test: deb
	$(MAKE) --no-print-directory install-test-run

# install-test on the packages already in dist/ (make test builds them once).
install-test-run:
	tests/install/run

# debootstrap on the host (the sandboxes' roots are built with it), installed before
# anything runs beside apt.
debootstrap:
	command -v debootstrap >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }

# The RAMDISK driver on real MooseFS 4 (Debian 13's, chrooted in namespaces of its own;
# tests/mfs4): needs no lab. Builds the cached Debian 13 root first (~1 min cold).
mfs4-test: install debootstrap
	$(VENV)/bin/pytest -q --durations=5 tests/mfs4

# Our Slurm side on a real Slurm of one release (its Debian's slurmctld and two slurmd,
# chrooted in namespaces of its own; tests/slurm_release, RSA_SLURM_RELEASE): the SPANK
# plugin built against that release and loaded, job_submit.lua and burst_buffer.lua under
# its slurmctld, the adapter's parsers on its output, with and without accounting
# (slurmdbd, MariaDB). Needs no lab. Each release its own cached root, ports and paths:
#   slurm24-test  Slurm 24.11, Debian 13 (/var/tmp/rsa-slurm24, ports 6917-6921); ~30 s,
#                 plus ~1 min to build the root once
#   slurm26-test  Slurm 26.05, Debian testing (/var/tmp/rsa-slurm26, ports 6927-6931);
#                 ~20 s, plus ~1 min to build the root once
# RSA_SLURM24_CAPTURE=tests/data/slurm/24.11 (RSA_SLURM26_CAPTURE=tests/data/slurm/26.05)
# rewrites the captures the unit tests read.
define slurm_release_test
	RSA_SLURM_RELEASE=$(1) $(VENV)/bin/pytest -q --durations=5 tests/slurm_release
endef
slurm24-test: install debootstrap
	$(call slurm_release_test,24.11)
slurm26-test: install debootstrap
	$(call slurm_release_test,26.05)

clean:
	rm -rf dist
	rm -rf $(VENV) $(WF_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	$(MAKE) --no-print-directory -s -C $(SPANK) clean

# Lab targets (lab-up, lab-down, ...) are owned by lab/.
-include lab/lab.mk

# The cluster lab (lab/cluster, issue 30; docs/lab.md "The cluster lab"): every node its
# own host, booted from one Debian image with the packages of `make deb` installed by apt.
# Run as root; make test runs it beside the lab phases. It brings the cluster up, runs
# tests/cluster (CLUSTER_TESTS narrows it), always takes it down, then checks nothing of it
# is left and that the check sees a planted leftover. Separate from the shared lab (its
# own namespaces, addresses 10.230.0.0/24, names rsacl*): it needs no lab lock.
# RSA_LAB_DEBIAN (above) picks the image's Debian release (issue 31): 13 (the default),
# 12 or testing; for 13 and testing, cluster-test also builds the SPANK package for that
# release's Slurm (lab/deb-release, in a cached root of its own).
CLUSTER_TESTS ?= tests/cluster
cluster-test: install deb
	$(MAKE) --no-print-directory cluster-run-whole

# The whole suite on one Debian release (make test-compat RSA_LAB_DEBIAN=12|testing):
# every lab phase on a host of that release and the whole cluster suite on it, side by
# side as in make test (the lanes queue, e2e, native and cluster-whole).
test-compat: install lint
	lab/install-packages.sh
	$(MAKE) --no-print-directory deb
	$(MAKE) --no-print-directory debootstrap
	$(MAKE) --no-print-directory lab-host
	$(MAKE) --no-print-directory release-debs
	$(MAKE) --no-print-directory lanes LANES='queue e2e native cluster-whole' RELEASE_DEBS=built

lane-cluster-whole: install
	$(MAKE) --no-print-directory cluster-run-whole

# cluster-test on the packages already in dist/ (make test builds them once): that
# release's SPANK package, then the suite.
cluster-run-whole: install
	$(if $(filter built,$(RELEASE_DEBS)),,$(MAKE) --no-print-directory release-debs)
	$(MAKE) --no-print-directory cluster-run

# make test's cluster runs: the whole suite on RSA_LAB_DEBIAN (cluster-run-whole), issue
# 31's compatibility set on the two other releases (COMPAT_TESTS: a whole lifecycle with
# checksums in both modes, an array, a hetjob, an idle-cluster wait, native stage-in and
# stage-out, the attacks and networks, one chaos round), each on the packages already in
# dist/ with that release's SPANK package built first. The rest of tests/cluster (the
# upgrade from the previous landing, whose packages it builds; accounting; the
# other-release plugin; the directory; slurmctld's hooks) runs on the default release in
# make test, and on the others with make test-compat RSA_LAB_DEBIAN=12|testing.
COMPAT_TESTS := tests/cluster/test_hosts.py tests/cluster/test_native.py \
                tests/cluster/test_compat.py tests/cluster/test_compat_native.py \
                tests/cluster/test_native_crash.py tests/cluster/test_attacks.py \
                tests/cluster/test_shared_node.py tests/cluster/test_networks.py
CLUSTER_RUNS := cluster-run-whole \
                $(patsubst %,cluster-run-%,$(filter-out $(RSA_LAB_DEBIAN),12 13 testing))
# Debian 12's runs with rsad on a host of its own (RSA_CLUSTER_RSAD=own; the others on
# the controller, the default): both places a site may give rsad stay tested.
cluster-run-12 cluster-run-13 cluster-run-testing: install
	$(if $(filter-out cluster-run-12,$@),lab/deb-release $(patsubst cluster-run-%,%,$@))
	$(if $(filter cluster-run-12,$@),RSA_CLUSTER_RSAD=own) $(MAKE) --no-print-directory cluster-run RSA_LAB_DEBIAN=$(patsubst cluster-run-%,%,$@) \
	  CLUSTER_TESTS='$(COMPAT_TESTS)'

# The host lab's tests on the cluster lab (lab/cluster/harness.py; docs/lab.md, "The host
# lab's tests on the cluster"): the cluster brought up with this repository bound into
# rsad's host, CLUSTER_LAB_TESTS run there by pytest as root (every other node through the
# harness's door), CLUSTER_LAB_MODE=native switches it to native mode first; the cluster
# is always taken down and checked clean. The packages already in dist/ (make deb).
CLUSTER_LAB_TESTS ?= tests/e2e
CLUSTER_LAB_MODE ?= queue
# the host lab's shape: 4 compute nodes, 4 RSA nodes with 2G pools
CLUSTER_LAB_NODES ?= 4
CLUSTER_LAB_POOL ?= 2G
cluster-lab-test: lab-host deb
	$(MAKE) --no-print-directory release-debs
	$(MAKE) --no-print-directory cluster-lab-run

# cluster-lab-test on the packages already in dist/ (make test builds them once)
cluster-lab-run:
	$(call CLUSTER_HARNESS_RUN,{ [ $(CLUSTER_LAB_MODE) = queue ] || \
	  lab/cluster/clusterctl mode $(CLUSTER_LAB_MODE); } && \
	  lab/cluster/clusterctl lab-test -q $(CLUSTER_LAB_TESTS))

# $(1), run once the cluster is up with this repository on rsad's host; whatever it
# returns, the cluster is taken down and checked clean (also on INT or TERM)
CLUSTER_HARNESS_RUN = export RSA_CLUSTER_HARNESS=$(CURDIR) RSA_LAB_DEBIAN=$(RSA_LAB_DEBIAN) \
	  RSA_CLUSTER_NAME=$(RSA_CLUSTER_NAME) \
	  RSA_CLUSTER_NODES=$(CLUSTER_LAB_NODES) RSA_CLUSTER_POOL=$(CLUSTER_LAB_POOL); \
	rc=0; trap 'lab/cluster/clusterctl down; exit 130' INT TERM; \
	{ lab/cluster/clusterctl up && $(1); } || rc=$$?; \
	lab/cluster/clusterctl down || rc=1; \
	lab/cluster/clusterctl check-clean || rc=1; \
	exit $$rc

# make demo on the cluster lab: lab/demo.py on rsad's host (clusterctl lab-run), every job
# across the cluster's compute nodes (CLUSTER_LAB_NODES); the cluster is always taken
# down and checked clean.
cluster-demo: lab-host deb
	$(MAKE) --no-print-directory release-debs
	$(call CLUSTER_HARNESS_RUN,lab/cluster/clusterctl lab-run /usr/bin/python3 lab/demo.py \
	  $(DEMO_ARGS))

# cluster-test on the packages already in dist/ (make test builds them once).
cluster-run: install
	rc=0; RSA_CLUSTER_LAB=1 RSA_LAB_DEBIAN=$(RSA_LAB_DEBIAN) \
	  $(VENV)/bin/pytest -q -p no:cacheprovider $(CLUSTER_TESTS) || rc=$$?; \
	lab/cluster/clusterctl check-clean || rc=1; \
	lab/cluster/clusterctl verify-check-clean || rc=1; \
	exit $$rc
