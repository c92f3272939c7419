/*
 * rsa-fake-stepd - a stand-in for slurmstepd (remote context) that loads rsa_spank.so and
 * calls its callbacks as slurmstepd 22.05 does for one step, for the tests
 * (tests/unit/test_spank.py builds it with -rdynamic; not installed, not in `make`).
 *
 *   rsa-fake-stepd SO JOB STEP [PLUGSTACK-ARG...] < lines
 *
 * stdin: the step's environment before the plugin runs, one KEY=VALUE a line, and
 * "OPTION name=value" for an --rsa-* option slurmstepd hands to the plugin (remote=1).
 * stdout: "init RC", "post_opt RC", then for one task (a forked child, as slurmstepd
 * forks each task) "task RC" and the task's environment as "ENV KEY=VALUE" lines (RSA_*
 * only), then "exit RC". Log lines go to stderr as "error: ..." / "verbose: ...".
 * The spank_* functions below are what the plugin calls; they keep the environment in
 * a plain array, like slurmstepd's job->env.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

#define MAX_ENV 256
#define MAX_OPTS 32

static char *env[MAX_ENV];
static int nenv;
static struct spank_option opts[MAX_OPTS];
static int nopts;
static uint32_t job_id, step_id;

static int find(const char *var)
{
	size_t n = strlen(var);
	for (int k = 0; k < nenv; k++)
		if (!strncmp(env[k], var, n) && env[k][n] == '=')
			return k;
	return -1;
}

spank_context_t spank_context(void)
{
	return S_CTX_REMOTE;
}

const char *spank_strerror(spank_err_t err)
{
	static char text[32];
	snprintf(text, sizeof(text), "spank error %d", (int) err);
	return text;
}

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
	(void) sp;
	if (nopts >= MAX_OPTS)
		return ESPANK_ERROR;
	opts[nopts++] = *opt;
	return ESPANK_SUCCESS;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
	va_list ap;
	spank_err_t rc = ESPANK_SUCCESS;
	(void) sp;
	va_start(ap, item);
	if (item == S_JOB_ID)
		*va_arg(ap, uint32_t *) = job_id;
	else if (item == S_JOB_STEPID)
		*va_arg(ap, uint32_t *) = step_id;
	else
		rc = ESPANK_BAD_ARG;
	va_end(ap);
	return rc;
}

spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
	(void) sp;
	int k = find(var);
	if (k < 0)
		return ESPANK_ENV_NOEXIST;
	const char *val = env[k] + strlen(var) + 1;
	if ((int) strlen(val) >= len)
		return ESPANK_NOSPACE;
	strcpy(buf, val);
	return ESPANK_SUCCESS;
}

spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
	(void) sp;
	int k = find(var);
	char *entry;
	if (k >= 0 && !overwrite)
		return ESPANK_ENV_EXISTS;
	if (asprintf(&entry, "%s=%s", var, val) < 0)
		return ESPANK_ERROR;
	if (k < 0) {
		if (nenv >= MAX_ENV) {
			free(entry);
			return ESPANK_ERROR;
		}
		k = nenv++;
	} else {
		free(env[k]);
	}
	env[k] = entry;
	return ESPANK_SUCCESS;
}

spank_err_t spank_unsetenv(spank_t sp, const char *var)
{
	(void) sp;
	int k = find(var);
	if (k >= 0) {
		free(env[k]);
		env[k] = env[--nenv];
	}
	return ESPANK_SUCCESS;
}

spank_err_t spank_job_control_setenv(spank_t sp, const char *name, const char *value,
				     int overwrite)
{
	(void) sp;
	(void) name;
	(void) value;
	(void) overwrite;
	return ESPANK_NOT_REMOTE;
}

void slurm_error(const char *format, ...)
{
	va_list ap;
	va_start(ap, format);
	fputs("error: ", stderr);
	vfprintf(stderr, format, ap);
	fputc('\n', stderr);
	va_end(ap);
}

void slurm_verbose(const char *format, ...)
{
	va_list ap;
	va_start(ap, format);
	fputs("verbose: ", stderr);
	vfprintf(stderr, format, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

int main(int ac, char **av)
{
	char line[8192];
	if (ac < 4) {
		fprintf(stderr, "usage: rsa-fake-stepd SO JOB STEP [ARG...] < env\n");
		return 2;
	}
	job_id = (uint32_t) strtoul(av[2], NULL, 10);
	step_id = (uint32_t) strtoul(av[3], NULL, 10);
	void *so = dlopen(av[1], RTLD_NOW | RTLD_GLOBAL);
	if (!so) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	spank_f *init = (spank_f *) dlsym(so, "slurm_spank_init");
	spank_f *post_opt = (spank_f *) dlsym(so, "slurm_spank_init_post_opt");
	spank_f *task = (spank_f *) dlsym(so, "slurm_spank_task_init_privileged");
	spank_f *fini = (spank_f *) dlsym(so, "slurm_spank_exit");
	if (!init || !post_opt || !task || !fini) {
		fprintf(stderr, "missing a callback\n");
		return 2;
	}
	spank_t sp = NULL;
	printf("init %d\n", init(sp, ac - 4, av + 4));
	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\n")] = '\0';
		if (!strncmp(line, "OPTION ", 7)) {
			char *eq = strchr(line + 7, '=');
			if (!eq)
				continue;
			*eq = '\0';
			for (int k = 0; k < nopts; k++)
				if (!strcmp(opts[k].name, line + 7))
					printf("option %d\n", opts[k].cb(opts[k].val, eq + 1, 1));
		} else if (strchr(line, '=') && nenv < MAX_ENV) {
			env[nenv++] = strdup(line);
		}
	}
	printf("post_opt %d\n", post_opt(sp, ac - 4, av + 4));
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		printf("task %d\n", task(sp, ac - 4, av + 4));
		qsort(env, (size_t) nenv, sizeof(env[0]), cmp);
		for (int k = 0; k < nenv; k++)
			if (!strncmp(env[k], "RSA_", 4))
				printf("ENV %s\n", env[k]);
		fflush(stdout);
		_exit(0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	printf("exit %d\n", fini(sp, ac - 4, av + 4));
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
