/*
 * rsa_spank.c - the rsa-scheduler SPANK plugin (Slurm 22.05): `--rsa-*` options for
 * sbatch, salloc and srun, RSA_* variables in the job's tasks, and per-job private mounts.
 *
 * What runs where (docs/spank.md has the full story):
 *   sbatch/salloc/srun (allocator and local context)
 *     slurm_spank_init       registers one option per #RSA_* directive with
 *                            spank_option_register() (a static spank_options[] table is
 *                            not seen by sbatch).
 *     option callback        checks the value exactly like the directive (rsa_grammar.c,
 *                            same messages); a bad value stops the command before it
 *                            contacts slurmctld.
 *     init_post_opt          passes every option as RSA_<NAME>=<value> with
 *                            spank_job_control_setenv: job_submit.lua merges it with the
 *                            script's #RSA_* lines (job_desc.spank_job_env); the node
 *                            Prolog sees it as SPANK_RSA_<NAME>.
 *   slurmstepd (remote context), for every step
 *     init_post_opt          (root, before the tasks fork) reads the node's job.env and
 *                            exports RSA_STATE, RSA_RAMDISK, ... to the step; opens the
 *                            job's RSA mount namespace when the node made one.
 *     task_init_privileged   (root, in each task after job_container's join) moves the
 *                            task into that namespace (rsa_jobenv.c:rsa_ns_join).
 * Nothing here ever fails a job because the RSA is unavailable: every remote-side problem
 * is logged and the task runs on the PFS (RSA_STATE=pfs). Only a bad --rsa-* value on
 * the command line is refused, like any bad option.
 *
 * plugstack.conf arguments: node_dir=/run/rsa/node (where the node side keeps per-job
 * state, = rsa_scheduler.node.mounts.DEFAULT_BASE), carry=/tmp:/dev/shm (the mounts of a
 * job container kept in the RSA namespace).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h> /* SLURM_EXTERN_CONT */
#include <slurm/spank.h>

#include "rsa_grammar.h"
#include "rsa_jobenv.h"

SPANK_PLUGIN(rsa, 1);

#define DEFAULT_NODE_DIR "/run/rsa/node"
#define DEFAULT_CARRY "/tmp:/dev/shm"
#define MAX_CARRY 8

static struct spank_option options[RSA_NDIRECTIVES];
static char *opt_value[RSA_NDIRECTIVES];
static int opt_seen_remote;

static char *node_dir;
static char *carry_text;
static const char *carry[MAX_CARRY + 1];

static uint32_t job_id;
static int jobdir_fd = -1;
static int ns_fd = -1;
static ino_t home_ns;

/* ---------------------------------------------------------------------------------
 * Options
 */
static int option_cb(int val, const char *optarg, int remote)
{
	char *out = NULL;
	if (val < 0 || val >= RSA_NDIRECTIVES)
		return -1;
	if (!optarg)
		optarg = "";
	if (remote) {
		/* checked where it was given; here it only tells that the job uses the RSA */
		opt_seen_remote = 1;
	} else {
		if (rsa_check_value(val, optarg, &out) < 0) {
			slurm_error("--%s: %s", rsa_directives[val].option,
				    out ? out : "out of memory");
			free(out);
			return -1;
		}
		free(out);
		if ((val == RSA_STAGE_OUT && opt_value[RSA_POSTPROCESS]) ||
		    (val == RSA_POSTPROCESS && opt_value[RSA_STAGE_OUT])) {
			char *msg = rsa_exclusive_options_message();
			slurm_error("--%s: %s", rsa_directives[RSA_POSTPROCESS].option,
				    msg ? msg : "out of memory");
			free(msg);
			return -1;
		}
	}
	free(opt_value[val]);
	opt_value[val] = strdup(optarg);
	return 0;
}

static void register_options(spank_t sp)
{
	for (int d = 0; d < RSA_NDIRECTIVES; d++) {
		options[d].name = (char *) rsa_directives[d].option;
		options[d].arginfo = (char *) rsa_directives[d].arginfo;
		options[d].usage = (char *) rsa_directives[d].usage;
		options[d].has_arg = 1;
		options[d].val = d;
		options[d].cb = option_cb;
		spank_err_t rc = spank_option_register(sp, &options[d]);
		if (rc != ESPANK_SUCCESS)
			slurm_error("rsa: cannot register --%s: %s", rsa_directives[d].option,
				    spank_strerror(rc));
	}
}

/* ---------------------------------------------------------------------------------
 * Plugin arguments
 */
static void parse_args(int ac, char **av)
{
	const char *carry_arg = DEFAULT_CARRY;
	free(node_dir);
	node_dir = strdup(DEFAULT_NODE_DIR);
	for (int i = 0; i < ac; i++) {
		if (!strncmp(av[i], "node_dir=", 9) && av[i][9] == '/') {
			free(node_dir);
			node_dir = strdup(av[i] + 9);
		} else if (!strncmp(av[i], "carry=", 6)) {
			carry_arg = av[i] + 6;
		} else {
			slurm_error("rsa: unknown plugstack.conf argument '%s' ignored "
				    "(known: node_dir=PATH, carry=PATH:PATH)", av[i]);
		}
	}
	free(carry_text);
	carry_text = strdup(carry_arg);
	int n = 0;
	for (char *p = carry_text, *save = NULL, *tok;
	     p && n < MAX_CARRY && (tok = strtok_r(p, ":", &save)); p = NULL)
		if (tok[0] == '/')
			carry[n++] = tok;
	carry[n] = NULL;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	parse_args(ac, av);
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
	case S_CTX_REMOTE:
		register_options(sp);
		break;
	default:
		break;
	}
	return 0;
}

/* ---------------------------------------------------------------------------------
 * Submission side: hand the options to job_submit.lua and the hooks
 */
static void pass_options(spank_t sp)
{
	for (int d = 0; d < RSA_NDIRECTIVES; d++) {
		char name[64];
		if (!opt_value[d])
			continue;
		snprintf(name, sizeof(name), "RSA_%s", rsa_directives[d].name);
		spank_err_t rc = spank_job_control_setenv(sp, name, opt_value[d], 1);
		if (rc != ESPANK_SUCCESS)
			slurm_error("rsa: cannot pass --%s to the job: %s",
				    rsa_directives[d].option, spank_strerror(rc));
	}
}

/* ---------------------------------------------------------------------------------
 * slurmstepd side
 */
static int job_has_options(spank_t sp)
{
	char buf[8];
	if (opt_seen_remote)
		return 1;
	for (int d = 0; d < RSA_NDIRECTIVES; d++) {
		char name[64];
		snprintf(name, sizeof(name), "SLURM_SPANK_RSA_%s", rsa_directives[d].name);
		spank_err_t rc = spank_getenv(sp, name, buf, sizeof(buf));
		if (rc == ESPANK_SUCCESS || rc == ESPANK_NOSPACE)
			return 1;
	}
	return 0;
}

/* The step gets exactly the node's variables: any other RSA_* it inherited (from the
 * batch step before the reset, or from the job that ran sbatch) describes something else. */
static void export_env(spank_t sp, const struct rsa_jobenv *env)
{
	for (int k = 0; k < env->n; k++) {
		spank_err_t rc = spank_setenv(sp, env->key[k], env->value[k], 1);
		if (rc != ESPANK_SUCCESS)
			slurm_error("rsa: job %u: cannot set %s: %s", job_id, env->key[k],
				    spank_strerror(rc));
	}
	for (int k = 0; rsa_jobenv_keys[k]; k++)
		if (!rsa_jobenv_get(env, rsa_jobenv_keys[k]))
			spank_unsetenv(sp, rsa_jobenv_keys[k]);
}

static void remote_setup(spank_t sp)
{
	struct rsa_jobenv env = {0};
	int have_file = 0;
	const char *node = getenv("SLURMD_NODENAME"); /* slurmstepd sets it for itself */
	uint32_t step_id = 0;
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS)
		return;
	/* the extern step runs no task; holding the namespace there would only outlive it */
	if (spank_get_item(sp, S_JOB_STEPID, &step_id) == ESPANK_SUCCESS &&
	    step_id == SLURM_EXTERN_CONT)
		return;
	if (node) {
		jobdir_fd = rsa_jobdir_open(node_dir, node, job_id, 0);
		if (jobdir_fd < 0 && errno != ENOENT)
			slurm_error("rsa: job %u: %s/%s/%u: %s; not used", job_id, node_dir, node,
				    job_id, strerror(errno));
	}
	if (jobdir_fd >= 0) {
		have_file = rsa_jobenv_read(jobdir_fd, 0, &env) == 0;
		if (!have_file && errno != ENOENT)
			slurm_error("rsa: job %u: cannot read %s: %s", job_id, RSA_JOBENV_FILE,
				    strerror(errno));
		ns_fd = rsa_ns_open(jobdir_fd, 0);
		home_ns = rsa_ns_current();
	}
	if (rsa_jobenv_for_task(&env, have_file, job_has_options(sp)) < 0)
		slurm_error("rsa: job %u: out of memory", job_id);
	export_env(sp, &env);
	rsa_jobenv_free(&env);
	if (ns_fd >= 0)
		slurm_verbose("rsa: job %u: tasks join the job's RSA mount namespace", job_id);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		pass_options(sp);
		break;
	case S_CTX_REMOTE:
		remote_setup(sp);
		break;
	default:
		break;
	}
	return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	char err[512];
	(void) ac;
	(void) av;
	if (ns_fd < 0)
		return 0;
	if (rsa_ns_join(ns_fd, jobdir_fd, home_ns, carry, err, sizeof(err)) < 0) {
		slurm_error("rsa: job %u: %s; this task reads and writes the PFS", job_id, err);
		spank_setenv(sp, "RSA_STATE", "pfs", 1);
		spank_unsetenv(sp, "RSA_RAMDISK"); /* as jobstate.after() writes a released job */
		spank_unsetenv(sp, "RSA_INPUT");
		spank_setenv(sp, "RSA_MESSAGE", "the RAMDISK could not be shown to this task "
			     "(see slurmd's log); it reads and writes the PFS", 1);
	}
	close(ns_fd); /* this task is in place; the descriptor must not reach the user */
	ns_fd = -1;
	return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void) sp;
	(void) ac;
	(void) av;
	if (ns_fd >= 0)
		close(ns_fd);
	if (jobdir_fd >= 0)
		close(jobdir_fd);
	ns_fd = jobdir_fd = -1;
	for (int d = 0; d < RSA_NDIRECTIVES; d++) {
		free(opt_value[d]);
		opt_value[d] = NULL;
	}
	free(node_dir);
	free(carry_text);
	node_dir = carry_text = NULL;
	return 0;
}
