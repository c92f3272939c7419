/*
 * rsa_grammar.h - the value grammar of the #RSA_* directives, in C, for the SPANK plugin.
 *
 * A port of the value half of rsa_scheduler/core/directives.py (the reference; the Lua
 * port in slurm_plugins/job_submit.lua is the other one): `--rsa-data-in=VALUE` means
 * exactly `#RSA_DATA_IN=VALUE`, split like Python's shlex.split and checked with the same
 * rules and the same messages. Pure: no Slurm headers, no I/O, no locale, no globals
 * that change. tests/unit/test_spank.py runs it against the shared vectors and the
 * Python grammar through rsa-spank-check (rsa_check.c).
 */
#ifndef RSA_GRAMMAR_H
#define RSA_GRAMMAR_H

#include <stddef.h>

/* Directives in declaration order (rsa_scheduler/core/grammar.py: GRAMMAR). */
/* BEGIN GENERATED: directives */
/* generated from rsa_scheduler/core/grammar.py by `make grammar`; do not edit */
enum rsa_directive {
	RSA_DATA_IN,
	RSA_DATA_OUT,
	RSA_PREPROCESS,
	RSA_POSTPROCESS,
	RSA_NODES,
	RSA_TIER,
	RSA_CAPACITY,
	RSA_STAGE_OUT,
	RSA_EARLY_START,
	RSA_INPUT,
	RSA_RESET,
	RSA_NDIRECTIVES
};
/* END GENERATED: directives */

/* How a directive's words become its value: one parser per kind (core/grammar.py: Kind). */
enum rsa_kind {
	RSA_KIND_PATH,
	RSA_KIND_ARGV,
	RSA_KIND_NODES,
	RSA_KIND_CAPACITY,
	RSA_KIND_CHOICE,
	RSA_KIND_RESET
};

struct rsa_directive_info {
	const char *name;    /* "DATA_IN" */
	const char *option;  /* "rsa-data-in" (without the leading "--") */
	const char *arginfo; /* one word for --help */
	const char *usage;   /* the --help text */
	const char *example; /* shown when the value is empty */
	enum rsa_kind kind;
	const char *const *choices; /* RSA_KIND_CHOICE: the values, NULL-terminated */
};

extern const struct rsa_directive_info rsa_directives[RSA_NDIRECTIVES];

/* The directive named `name` ("DATA_IN"), or -1. */
int rsa_directive_by_name(const char *name);

/*
 * Check `value` as the text after "#RSA_<NAME>=". Returns 0 and sets *out to the
 * canonical value as JSON (what DirectiveSpec.to_json() holds for it: a string, a list
 * of strings or an integer), or -1 and sets *out to the user's message. *out is
 * malloc()ed (free it); on memory exhaustion it is NULL and the result -1.
 */
int rsa_check_value(int directive, const char *value, char **out);

/* The message for --rsa-stage-out together with --rsa-postprocess (malloc()ed). */
char *rsa_exclusive_options_message(void);

#endif
