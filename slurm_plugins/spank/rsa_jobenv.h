/*
 * rsa_jobenv.h - what the compute node knows about a job's RSA, for its tasks.
 *
 * The node Prolog and the job's node agent (rsa_scheduler/node/jobstate.py) keep a small
 * file <node_dir>/<node>/<job>/job.env of KEY=VALUE lines; in private-mount mode the
 * same directory holds "mnt", the job's RSA mount namespace (an nsfs bind mount). This
 * module reads both safely (root-owned, no symlinks, no writable-by-others) and joins the
 * namespace; rsa_spank.c calls it from slurmstepd. No Slurm headers.
 */
#ifndef RSA_JOBENV_H
#define RSA_JOBENV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define RSA_JOBENV_FILE "job.env"
#define RSA_JOBENV_NS "mnt"
#define RSA_JOBENV_MAXVARS 8

/* Every variable the plugin may export (documented in docs/spank.md). */
extern const char *const rsa_jobenv_keys[];

struct rsa_jobenv {
	int n;
	char *key[RSA_JOBENV_MAXVARS];
	char *value[RSA_JOBENV_MAXVARS];
};

/* Parse job.env text: known keys only, values of at most 4095 bytes without control
 * characters, a later line overriding an earlier one. Returns the number of variables,
 * or -1 when out of memory. */
int rsa_jobenv_parse(const char *text, size_t len, struct rsa_jobenv *env);

/* Set (or replace) one variable; -1 when out of memory or the key is unknown. */
int rsa_jobenv_set(struct rsa_jobenv *env, const char *key, const char *value);
const char *rsa_jobenv_get(const struct rsa_jobenv *env, const char *key);
void rsa_jobenv_free(struct rsa_jobenv *env);

/* Open <node_dir>/<node>/<job> (O_PATH) after checking every directory below node_dir
 * and node_dir itself is owned by `owner` and writable by nobody else, and that no
 * component is a symlink. -1 with errno (ENOENT: the node has nothing for this job). */
int rsa_jobdir_open(const char *node_dir, const char *node, uint32_t job, uid_t owner);

/* Read job.env from an open job directory (same ownership rules). 0, or -1 with errno. */
int rsa_jobenv_read(int jobdir_fd, uid_t owner, struct rsa_jobenv *env);

/* What a task of the job gets: the file's variables; without a file, for a job that
 * asked for the RSA by option, RSA_STATE=unavailable and a message; else nothing. */
int rsa_jobenv_for_task(struct rsa_jobenv *env, int have_file, int has_options);

/* The job's RSA mount namespace ("mnt" in the job directory, an nsfs mount owned by
 * `owner`), opened O_RDONLY|O_CLOEXEC; -1 with errno when there is none. */
int rsa_ns_open(int jobdir_fd, uid_t owner);

/* The inode of the calling process's mount namespace, or 0. */
ino_t rsa_ns_current(void);

/*
 * Move the calling (single-threaded, privileged) process into the namespace `ns_fd`.
 * When it is not in `home_ns` (slurmstepd's own namespace) it is in a job container
 * (job_container/tmpfs): the mounts at `carry` (e.g. /tmp, /dev/shm) of that container
 * are first cloned into the RSA namespace, once per job (flock + marker file in the job
 * directory), so the job keeps its private /tmp. The working directory is re-entered by
 * path. 0, or -1 with a one-line reason in err (the process is then where it was).
 */
int rsa_ns_join(int ns_fd, int jobdir_fd, ino_t home_ns, const char *const *carry,
		char *err, size_t errlen);

#endif
