/*
 * rsa_jobenv.c - read the node's per-job RSA state and join the job's RSA mount
 * namespace (see rsa_jobenv.h). Linux only; no Slurm headers.
 */
#define _GNU_SOURCE
#include "rsa_jobenv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

#define MAX_FILE (64 * 1024)
#define MAX_VALUE 4095

const char *const rsa_jobenv_keys[] = {
	"RSA_STATE", "RSA_RAMDISK", "RSA_DATA_IN", "RSA_DATA_OUT",
	"RSA_INPUT", "RSA_MOUNTS", "RSA_MESSAGE", NULL,
};

static int known_key(const char *key, size_t n)
{
	for (int k = 0; rsa_jobenv_keys[k]; k++)
		if (strlen(rsa_jobenv_keys[k]) == n && !memcmp(rsa_jobenv_keys[k], key, n))
			return 1;
	return 0;
}

int rsa_jobenv_set(struct rsa_jobenv *env, const char *key, const char *value)
{
	if (!known_key(key, strlen(key)))
		return -1;
	char *v = strdup(value);
	if (!v)
		return -1;
	for (int k = 0; k < env->n; k++) {
		if (!strcmp(env->key[k], key)) {
			free(env->value[k]);
			env->value[k] = v;
			return 0;
		}
	}
	if (env->n >= RSA_JOBENV_MAXVARS) {
		free(v);
		return -1;
	}
	env->key[env->n] = strdup(key);
	if (!env->key[env->n]) {
		free(v);
		return -1;
	}
	env->value[env->n++] = v;
	return 0;
}

const char *rsa_jobenv_get(const struct rsa_jobenv *env, const char *key)
{
	for (int k = 0; k < env->n; k++)
		if (!strcmp(env->key[k], key))
			return env->value[k];
	return NULL;
}

void rsa_jobenv_free(struct rsa_jobenv *env)
{
	for (int k = 0; k < env->n; k++) {
		free(env->key[k]);
		free(env->value[k]);
	}
	env->n = 0;
}

int rsa_jobenv_parse(const char *text, size_t len, struct rsa_jobenv *env)
{
	size_t pos = 0;
	while (pos < len) {
		const char *line = text + pos;
		const char *nl = memchr(line, '\n', len - pos);
		size_t n = nl ? (size_t) (nl - line) : len - pos;
		pos += n + 1;
		const char *eq = memchr(line, '=', n);
		if (!eq || line[0] == '#')
			continue;
		size_t klen = (size_t) (eq - line), vlen = n - klen - 1;
		if (!known_key(line, klen) || vlen > MAX_VALUE)
			continue;
		int bad = 0;
		for (size_t i = 0; i < vlen; i++) {
			unsigned char c = (unsigned char) eq[1 + i];
			if (c < 0x20 || c == 0x7F)
				bad = 1;
		}
		if (bad)
			continue;
		char key[32], value[MAX_VALUE + 1];
		memcpy(key, line, klen);
		key[klen] = '\0';
		memcpy(value, eq + 1, vlen);
		value[vlen] = '\0';
		if (rsa_jobenv_set(env, key, value) < 0)
			return -1;
	}
	return env->n;
}

/* A directory or file we may trust: owned by `owner`, not writable by group or others. */
static int trusted(int fd, uid_t owner, mode_t type)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return 0;
	if ((st.st_mode & S_IFMT) != type || st.st_uid != owner || (st.st_mode & 022)) {
		errno = EPERM;
		return 0;
	}
	return 1;
}

static int valid_name(const char *name)
{
	return name && name[0] && strcmp(name, ".") && strcmp(name, "..") && !strchr(name, '/') &&
	       strlen(name) < 256;
}

int rsa_jobdir_open(const char *node_dir, const char *node, uint32_t job, uid_t owner)
{
	char jobname[16];
	const int flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	if (!node_dir || node_dir[0] != '/' || !valid_name(node)) {
		errno = EINVAL;
		return -1;
	}
	snprintf(jobname, sizeof(jobname), "%u", job);
	int base = open(node_dir, O_PATH | O_DIRECTORY | O_CLOEXEC); /* the admin's choice */
	if (base < 0)
		return -1;
	if (!trusted(base, owner, S_IFDIR)) {
		close(base);
		return -1;
	}
	int nodefd = openat(base, node, flags);
	close(base);
	if (nodefd < 0)
		return -1;
	if (!trusted(nodefd, owner, S_IFDIR)) {
		close(nodefd);
		return -1;
	}
	int jobfd = openat(nodefd, jobname, flags);
	close(nodefd);
	if (jobfd < 0)
		return -1;
	if (!trusted(jobfd, owner, S_IFDIR)) {
		close(jobfd);
		return -1;
	}
	return jobfd;
}

int rsa_jobenv_read(int jobdir_fd, uid_t owner, struct rsa_jobenv *env)
{
	char *text;
	ssize_t got, total = 0;
	/* O_NONBLOCK: a FIFO (or device) must not hang slurmstepd; trusted() refuses it */
	int fd = openat(jobdir_fd, RSA_JOBENV_FILE,
			O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return -1;
	if (!trusted(fd, owner, S_IFREG) || !(text = malloc(MAX_FILE))) {
		close(fd);
		return -1;
	}
	while (total < MAX_FILE && (got = read(fd, text + total, MAX_FILE - total)) != 0) {
		if (got < 0) {
			if (errno == EINTR)
				continue;
			free(text);
			close(fd);
			return -1;
		}
		total += got;
	}
	close(fd);
	int rc = rsa_jobenv_parse(text, (size_t) total, env);
	free(text);
	return rc < 0 ? -1 : 0;
}

int rsa_jobenv_for_task(struct rsa_jobenv *env, int have_file, int has_options)
{
	if (have_file) {
		if (!rsa_jobenv_get(env, "RSA_STATE"))
			return rsa_jobenv_set(env, "RSA_STATE", "unavailable");
		return 0;
	}
	if (!has_options)
		return 0;
	if (rsa_jobenv_set(env, "RSA_STATE", "unavailable") < 0 ||
	    rsa_jobenv_set(env, "RSA_MESSAGE",
			   "this node has no RSA state for the job (rsad unreachable at its "
			   "start?); it reads and writes the PFS") < 0)
		return -1;
	return 0;
}

int rsa_ns_open(int jobdir_fd, uid_t owner)
{
	struct statfs sfs;
	struct stat st;
	int fd = openat(jobdir_fd, RSA_JOBENV_NS,
			O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return -1;
	if (fstatfs(fd, &sfs) < 0 || sfs.f_type != NSFS_MAGIC || fstat(fd, &st) < 0 ||
	    st.st_uid != owner) {
		close(fd);
		errno = ENOENT; /* a plain file: node-wide mode, or the Prolog did not get there */
		return -1;
	}
	return fd;
}

ino_t rsa_ns_current(void)
{
	struct stat st;
	if (stat("/proc/self/ns/mnt", &st) < 0)
		return 0;
	return st.st_ino;
}

static int say(char *err, size_t errlen, const char *what, const char *path)
{
	snprintf(err, errlen, "%s%s%s: %s", what, path ? " " : "", path ? path : "",
		 strerror(errno));
	return -1;
}

/* Clone `carry` of the current namespace, enter ns_fd, attach the clones there. */
static int carry_and_enter(int ns_fd, const char *const *carry, char *err, size_t errlen)
{
	int trees[8], n = 0, rc = -1;
	int home = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
	if (home < 0)
		return say(err, errlen, "cannot open the job container's namespace", NULL);
	for (; carry && carry[n] && n < 8; n++) {
		trees[n] = (int) syscall(SYS_open_tree, AT_FDCWD, carry[n],
					 OPEN_TREE_CLONE | AT_RECURSIVE | O_CLOEXEC);
		if (trees[n] < 0) {
			say(err, errlen, "cannot clone the job container's", carry[n]);
			goto out;
		}
	}
	if (setns(ns_fd, CLONE_NEWNS) < 0) {
		say(err, errlen, "cannot enter the job's RSA mount namespace", NULL);
		goto out;
	}
	for (int k = 0; k < n; k++) {
		if (syscall(SYS_move_mount, trees[k], "", AT_FDCWD, carry[k],
			    MOVE_MOUNT_F_EMPTY_PATH) < 0) {
			say(err, errlen, "cannot attach the job container's", carry[k]);
			if (setns(home, CLONE_NEWNS) < 0) /* back where we were */
				snprintf(err, errlen, "lost between mount namespaces: %s",
					 strerror(errno));
			goto out;
		}
	}
	rc = 0;
out:
	for (int k = 0; k < n; k++)
		if (trees[k] >= 0)
			close(trees[k]);
	close(home);
	return rc;
}

int rsa_ns_join(int ns_fd, int jobdir_fd, ino_t home_ns, const char *const *carry,
		char *err, size_t errlen)
{
	char cwd[PATH_MAX];
	struct stat target;
	int have_cwd = getcwd(cwd, sizeof(cwd)) != NULL, rc = 0;
	ino_t self = rsa_ns_current();
	if (fstat(ns_fd, &target) < 0)
		return say(err, errlen, "cannot inspect the job's RSA mount namespace", NULL);
	if (self && self == target.st_ino)
		return 0; /* already there */
	if (self && home_ns && self != home_ns && carry && carry[0]) {
		int lock = openat(jobdir_fd, "carry.lock",
				  O_CREAT | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (lock < 0)
			return say(err, errlen, "cannot open carry.lock in the job directory", NULL);
		while (flock(lock, LOCK_EX) < 0 && errno == EINTR)
			;
		if (faccessat(jobdir_fd, "carried", F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
			if (setns(ns_fd, CLONE_NEWNS) < 0)
				rc = say(err, errlen, "cannot enter the job's RSA mount namespace",
					 NULL);
		} else {
			rc = carry_and_enter(ns_fd, carry, err, errlen);
			if (rc == 0) {
				int mark = openat(jobdir_fd, "carried",
						  O_CREAT | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
				if (mark >= 0)
					close(mark);
			}
		}
		flock(lock, LOCK_UN);
		close(lock);
	} else if (setns(ns_fd, CLONE_NEWNS) < 0) {
		rc = say(err, errlen, "cannot enter the job's RSA mount namespace", NULL);
	}
	if (rc == 0 && have_cwd && chdir(cwd) < 0 && chdir("/") < 0) {
		/* slurmstepd changes to the job's directory itself after this */
	}
	return rc;
}
