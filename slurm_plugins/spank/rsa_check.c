/*
 * rsa-spank-check - drive the plugin's pure parts outside Slurm, for the tests
 * (tests/unit/test_spank.py). Not installed.
 *
 *   rsa-spank-check values < NAME\0VALUE\0...   one line per pair:
 *                                                "OK <canonical JSON>" or "ERR <message>"
 *   rsa-spank-check exclusive                    the --rsa-stage-out/--rsa-postprocess message
 *   rsa-spank-check jobenv NODE_DIR NODE JOB HAS_OPTIONS
 *                                                the KEY=VALUE lines a task would get
 *                                                (files must belong to the caller)
 *   rsa-spank-check join NODE_DIR NODE JOB [--container] -- CMD...
 *                                                what slurmstepd does: open the job's
 *                                                namespace, then in a child (optionally
 *                                                first in a fresh private namespace with
 *                                                its own /tmp, like job_container/tmpfs)
 *                                                join it and run CMD
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rsa_grammar.h"
#include "rsa_jobenv.h"

static int values(void)
{
	size_t cap = 1 << 16, len = 0;
	char *in = malloc(cap);
	size_t got;
	while (in && (got = fread(in + len, 1, cap - len, stdin)) > 0) {
		len += got;
		if (len == cap)
			in = realloc(in, cap *= 2);
	}
	if (!in)
		return 2;
	for (size_t pos = 0; pos < len;) {
		const char *name = in + pos;
		size_t nlen = strnlen(name, len - pos);
		if (pos + nlen + 1 >= len + 1)
			break;
		const char *value = name + nlen + 1;
		size_t vlen = strnlen(value, len - pos - nlen - 1);
		pos += nlen + 1 + vlen + 1;
		char *nm = strndup(name, nlen), *val = strndup(value, vlen), *out = NULL;
		int d = rsa_directive_by_name(nm);
		int rc = rsa_check_value(d, val, &out);
		printf("%s %s\n", rc == 0 ? "OK" : "ERR", out ? out : "(no output)");
		free(out);
		free(nm);
		free(val);
	}
	free(in);
	return 0;
}

static int jobenv(char **av)
{
	struct rsa_jobenv env = {0};
	int have_file = 0;
	int dir = rsa_jobdir_open(av[0], av[1], (uint32_t) strtoul(av[2], NULL, 10), geteuid());
	if (dir >= 0)
		have_file = rsa_jobenv_read(dir, geteuid(), &env) == 0;
	else if (errno != ENOENT)
		fprintf(stderr, "jobdir: %s\n", strerror(errno));
	rsa_jobenv_for_task(&env, have_file, atoi(av[3]));
	for (int k = 0; k < env.n; k++)
		printf("%s=%s\n", env.key[k], env.value[k]);
	rsa_jobenv_free(&env);
	return 0;
}

static int join(int ac, char **av)
{
	const char *carry[] = {"/tmp", "/dev/shm", NULL};
	int container = 0, k = 3;
	if (k < ac && !strcmp(av[k], "--container")) {
		container = 1;
		k++;
	}
	if (k >= ac || strcmp(av[k], "--"))
		return 2;
	int dir = rsa_jobdir_open(av[0], av[1], (uint32_t) strtoul(av[2], NULL, 10), geteuid());
	if (dir < 0) {
		fprintf(stderr, "jobdir: %s\n", strerror(errno));
		return 1;
	}
	int ns = rsa_ns_open(dir, geteuid());
	if (ns < 0) {
		fprintf(stderr, "no namespace: %s\n", strerror(errno));
		return 1;
	}
	ino_t home = rsa_ns_current();
	pid_t pid = fork();
	if (pid == 0) {
		char err[512];
		if (container && (unshare(CLONE_NEWNS) < 0 ||
				  mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
				  mount("rsa-test-container", "/tmp", "tmpfs", 0, NULL) < 0)) {
			perror("container");
			_exit(1);
		}
		if (container) {
			FILE *f = fopen("/tmp/container", "w");
			if (f)
				fclose(f);
		}
		if (rsa_ns_join(ns, dir, home, carry, err, sizeof(err)) < 0) {
			fprintf(stderr, "join: %s\n", err);
			_exit(3);
		}
		close(ns);
		execvp(av[k + 1], av + k + 1);
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int ac, char **av)
{
	if (ac >= 2 && !strcmp(av[1], "values"))
		return values();
	if (ac == 2 && !strcmp(av[1], "exclusive")) {
		char *msg = rsa_exclusive_options_message();
		printf("%s\n", msg);
		free(msg);
		return 0;
	}
	if (ac == 6 && !strcmp(av[1], "jobenv"))
		return jobenv(av + 2);
	if (ac >= 7 && !strcmp(av[1], "join"))
		return join(ac - 2, av + 2);
	fprintf(stderr, "usage: rsa-spank-check values|exclusive|jobenv|join ...\n");
	return 2;
}
