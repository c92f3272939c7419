/*
 * rsa_grammar.c - the #RSA_* value grammar in C (see rsa_grammar.h).
 *
 * Every function mirrors one in rsa_scheduler/core/directives.py (named in its comment)
 * and its Lua twin in slurm_plugins/job_submit.lua. Strings are bytes; Python decodes a
 * script as UTF-8 with surrogateescape, so each byte of an invalid sequence counts as one
 * character here too, also after shlex (rsa_escape_invalid() in rsa_check_value()).
 * Messages must stay byte-identical to Python's.
 */
#include "rsa_grammar.h"
#include "rsa_text.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The grammar's data: limits, choices, the directive table (core/grammar.py) */
/* BEGIN GENERATED: tables */
/* generated from rsa_scheduler/core/grammar.py by `make grammar`; do not edit */
#define PATH_MAX_ 4096
#define NAME_MAX_ 255
#define MAX_NODES 2147483647ULL
#define MAX_CAPACITY 9007199254740992.0
#define MAX_RESET 31536000.0
#define RSA_MSG_EXCLUSIVE_OPTIONS \
	"RSA_STAGE_OUT and RSA_POSTPROCESS both choose how output is staged out " \
	"(--rsa-stage-out and --rsa-postprocess); keep one"

static const char *const CHOICES_TIER[] = {"ram", "ssd", "auto", NULL};
static const char *const CHOICES_STAGE_OUT[] = {"rsync", "tar", NULL};
static const char *const CHOICES_EARLY_START[] = {"fallback", "wait", "union", NULL};
static const char *const CHOICES_INPUT[] = {"ro", "rw", NULL};

const struct rsa_directive_info rsa_directives[RSA_NDIRECTIVES] = {
	{"DATA_IN", "rsa-data-in", "path",
	 "RSA: stage this directory into a RAMDISK and mount it there (#RSA_DATA_IN)",
	 "/gpfs/alice/input", RSA_KIND_PATH, NULL},
	{"DATA_OUT", "rsa-data-out", "path",
	 "RSA: write output to a RAMDISK mounted here, staged out after the job "
	 "(#RSA_DATA_OUT)",
	 "/gpfs/alice/output", RSA_KIND_PATH, NULL},
	{"PREPROCESS", "rsa-preprocess", "command",
	 "RSA: run this program instead of the default stage-in copy (#RSA_PREPROCESS)",
	 "/home/alice/bin/unpack.sh --fast", RSA_KIND_ARGV, NULL},
	{"POSTPROCESS", "rsa-postprocess", "command",
	 "RSA: run this program instead of the default stage-out (#RSA_POSTPROCESS)",
	 "/home/alice/bin/pack.sh out.tar", RSA_KIND_ARGV, NULL},
	{"NODES", "rsa-nodes", "n",
	 "RSA: number of RSA nodes (#RSA_NODES)",
	 "2", RSA_KIND_NODES, NULL},
	{"TIER", "rsa-tier", "ram|ssd|auto",
	 "RSA: kind of RSA nodes (#RSA_TIER)",
	 "ram", RSA_KIND_CHOICE, CHOICES_TIER},
	{"CAPACITY", "rsa-capacity", "size",
	 "RSA: RAMDISK space the job needs, e.g. 512G (#RSA_CAPACITY)",
	 "512G", RSA_KIND_CAPACITY, NULL},
	{"STAGE_OUT", "rsa-stage-out", "rsync|tar",
	 "RSA: how output is staged out (#RSA_STAGE_OUT)",
	 "rsync", RSA_KIND_CHOICE, CHOICES_STAGE_OUT},
	{"EARLY_START", "rsa-early-start", "fallback|wait|union",
	 "RSA: if the job starts before its stage-in finished (#RSA_EARLY_START)",
	 "fallback", RSA_KIND_CHOICE, CHOICES_EARLY_START},
	{"INPUT", "rsa-input", "ro|rw",
	 "RSA: staged input read-only or writable (#RSA_INPUT)",
	 "ro", RSA_KIND_CHOICE, CHOICES_INPUT},
	{"RESET", "rsa-reset", "input-done|time",
	 "RSA: when the RAMDISK switches from input to output (#RSA_RESET)",
	 "input-done", RSA_KIND_RESET, NULL},
};
/* END GENERATED: tables */

int rsa_directive_by_name(const char *name)
{
	for (int d = 0; d < RSA_NDIRECTIVES; d++)
		if (!strcmp(rsa_directives[d].name, name))
			return d;
	return -1;
}

/* ---------------------------------------------------------------------------------
 * Value parsers: (directive, words) -> canonical JSON in *ok, or the message in *msg.
 * Each returns 0 or -1.
 */
static const char *NAME(int d)
{
	return rsa_directives[d].name;
}

static void add_json_string(struct rsa_buf *b, const char *s)
{
	rsa_buf_add(b, "\"");
	for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
		if (*p == '"' || *p == '\\')
			rsa_buf_printf(b, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7F)
			rsa_buf_printf(b, "\\u%04x", *p);
		else
			rsa_buf_addn(b, (const char *) p, 1);
	}
	rsa_buf_add(b, "\"");
}

/* directives._one() */
static const char *one(int d, const struct rsa_words *ws, const char *hint, struct rsa_buf *msg)
{
	if (ws->n == 1)
		return ws->w[0];
	rsa_buf_printf(msg, "RSA_%s takes one value, got %zu words (", NAME(d), ws->n);
	for (size_t k = 0; k < ws->n; k++) {
		if (k)
			rsa_buf_add(msg, " ");
		rsa_add_quoted(msg, ws->w[k], strlen(ws->w[k]));
	}
	rsa_buf_printf(msg, "); %s", hint ? hint : "remove the extra words");
	return NULL;
}

/* directives.normalise_path(): the normalised path into *path, or -1. */
static int normalise_path(int d, const char *raw, struct rsa_buf *path, struct rsa_buf *msg)
{
	size_t n = strlen(raw);
	int bad = rsa_undecodable(raw, n);
	if (bad >= 0) {
		rsa_buf_printf(msg, "RSA_%s must be valid UTF-8, found byte 0x%02x in ", NAME(d), bad);
		rsa_add_quoted(msg, raw, n);
		return -1;
	}
	if (rsa_has_control(raw, n)) {
		rsa_buf_printf(msg, "RSA_%s must not contain control characters, got ", NAME(d));
		rsa_add_quoted(msg, raw, n);
		return -1;
	}
	if (raw[0] != '/') {
		rsa_buf_printf(msg, "RSA_%s must be an absolute path, got ", NAME(d));
		rsa_add_quoted(msg, raw, n);
		return -1;
	}
	size_t parts = 0;
	for (size_t i = 0; i < n;) { /* '.' and '..' first, as Python checks all parts */
		while (i < n && raw[i] == '/')
			i++;
		size_t start = i;
		while (i < n && raw[i] != '/')
			i++;
		size_t len = i - start;
		if (!len)
			continue;
		parts++;
		if ((len == 1 && raw[start] == '.') ||
		    (len == 2 && raw[start] == '.' && raw[start + 1] == '.')) {
			rsa_buf_printf(msg, "RSA_%s must not contain '.' or '..' components, got ",
				   NAME(d));
			rsa_add_quoted(msg, raw, n);
			rsa_buf_add(msg, "; write the direct path");
			return -1;
		}
	}
	if (!parts) {
		rsa_buf_printf(msg, "RSA_%s must not be the root directory '/'; name a directory "
			   "below it", NAME(d));
		return -1;
	}
	for (size_t i = 0; i < n;) {
		while (i < n && raw[i] == '/')
			i++;
		size_t start = i;
		while (i < n && raw[i] != '/')
			i++;
		if (i - start > NAME_MAX_) {
			rsa_buf_printf(msg, "RSA_%s has a path component longer than %d bytes", NAME(d),
				   NAME_MAX_);
			return -1;
		}
		if (i > start) {
			rsa_buf_add(path, "/");
			rsa_buf_addn(path, raw + start, i - start);
		}
	}
	if (path->len >= PATH_MAX_) {
		rsa_buf_printf(msg, "RSA_%s is longer than %d bytes", NAME(d), PATH_MAX_ - 1);
		return -1;
	}
	return 0;
}

static int parse_path(int d, const struct rsa_words *ws, struct rsa_buf *ok, struct rsa_buf *msg)
{
	const char *value = one(d, ws, "put a path that contains spaces in double quotes", msg);
	struct rsa_buf path = {0};
	if (!value)
		return -1;
	if (normalise_path(d, value, &path, msg) < 0) {
		free(path.s);
		return -1;
	}
	if (path.failed) {
		msg->failed = 1;
		return -1;
	}
	add_json_string(ok, path.s);
	free(path.s);
	return 0;
}

/* directives._argv() */
static int parse_argv(int d, const struct rsa_words *ws, struct rsa_buf *ok, struct rsa_buf *msg)
{
	const char *prog = ws->w[0];
	struct rsa_buf path = {0};
	if (prog[0] != '/' && rsa_undecodable(prog, strlen(prog)) < 0) {
		rsa_buf_printf(msg, "RSA_%s must start with the absolute path of a program, got ",
			   NAME(d));
		rsa_add_quoted(msg, prog, strlen(prog));
		return -1;
	}
	if (normalise_path(d, prog, &path, msg) < 0) {
		free(path.s);
		return -1;
	}
	for (size_t k = 1; k < ws->n; k++) {
		int bad = rsa_undecodable(ws->w[k], strlen(ws->w[k]));
		if (bad >= 0) {
			rsa_buf_printf(msg, "RSA_%s argument %zu must be valid UTF-8, found byte 0x%02x",
				   NAME(d), k, bad);
			free(path.s);
			return -1;
		}
	}
	rsa_buf_add(ok, "[");
	add_json_string(ok, path.s ? path.s : "");
	free(path.s);
	for (size_t k = 1; k < ws->n; k++) {
		rsa_buf_add(ok, ", ");
		add_json_string(ok, ws->w[k]);
	}
	rsa_buf_add(ok, "]");
	return 0;
}

/* directives._choice() */
static int parse_choice(int d, const struct rsa_words *ws, const char *const *choices,
			struct rsa_buf *ok, struct rsa_buf *msg)
{
	const char *value = one(d, ws, NULL, msg);
	size_t lw;
	if (!value)
		return -1;
	char *lowered = rsa_lower_shape(value, strlen(value), &lw);
	if (!lowered) {
		msg->failed = 1;
		return -1;
	}
	for (int c = 0; choices[c]; c++) {
		if (strlen(choices[c]) == lw && !memcmp(choices[c], lowered, lw)) {
			add_json_string(ok, choices[c]);
			free(lowered);
			return 0;
		}
	}
	const char *hint = rsa_close_match(lowered, lw, choices);
	free(lowered);
	rsa_buf_printf(msg, "RSA_%s must be one of ", NAME(d));
	for (int c = 0; choices[c]; c++)
		rsa_buf_printf(msg, "%s%s", c ? ", " : "", choices[c]);
	rsa_buf_add(msg, ", got ");
	rsa_add_quoted(msg, value, strlen(value));
	if (hint)
		rsa_buf_printf(msg, "; did you mean %s?", hint);
	return -1;
}

/* The end (exclusive) of a run of 1..max ASCII digits at s[from], or 0. */
static size_t digits(const char *s, size_t from, size_t max)
{
	size_t e = from;
	while (s[e] >= '0' && s[e] <= '9')
		e++;
	if (e == from || e - from > max)
		return 0;
	return e;
}

/* directives._nodes() */
static int parse_nodes(int d, const struct rsa_words *ws, struct rsa_buf *ok, struct rsa_buf *msg)
{
	const char *value = one(d, ws, NULL, msg);
	if (!value)
		return -1;
	size_t e = digits(value, 0, 10);
	if (e && !value[e]) {
		unsigned long long nodes = strtoull(value, NULL, 10);
		if (nodes >= 1 && nodes <= MAX_NODES) {
			rsa_buf_printf(ok, "%llu", nodes);
			return 0;
		}
	}
	rsa_buf_printf(msg, "RSA_%s must be a whole number of RSA nodes, at least 1, got ", NAME(d));
	rsa_add_quoted(msg, value, strlen(value));
	return -1;
}

static int unit_power(char c)
{
	switch (c) {
	case 'K': case 'k': return 1;
	case 'M': case 'm': return 2;
	case 'G': case 'g': return 3;
	case 'T': case 't': return 4;
	case 'P': case 'p': return 5;
	default: return 0;
	}
}

/* directives._capacity(): [0-9]{1,20}(\.[0-9]{1,20})?([KMGTPkmgtp](i?[Bb])?)? */
static int parse_capacity(int d, const struct rsa_words *ws, struct rsa_buf *ok, struct rsa_buf *msg)
{
	const char *value = one(d, ws, NULL, msg);
	if (!value)
		return -1;
	size_t e = digits(value, 0, 20);
	if (e && value[e] == '.')
		e = digits(value, e + 1, 20);
	int power = -1; /* -1: not a size; 0: no unit */
	if (e) {
		const char *unit = value + e;
		if (!unit[0])
			power = 0;
		else if (unit_power(unit[0]) &&
			 (!unit[1] || ((unit[1] == 'B' || unit[1] == 'b') && !unit[2]) ||
			  (unit[1] == 'i' && (unit[2] == 'B' || unit[2] == 'b') && !unit[3])))
			power = unit_power(unit[0]);
	}
	if (power == 0) {
		rsa_buf_printf(msg, "RSA_%s needs a unit K, M, G, T or P, e.g. 512G; got ", NAME(d));
		rsa_add_quoted(msg, value, strlen(value));
		return -1;
	}
	if (power < 0) {
		rsa_buf_printf(msg, "RSA_%s must be a size such as 512G or 3.5T, got ", NAME(d));
		rsa_add_quoted(msg, value, strlen(value));
		return -1;
	}
	char number[64];
	memcpy(number, value, e);
	number[e] = '\0';
	double size = strtod(number, NULL); /* correctly rounded, as Python's float() */
	for (int k = 0; k < power; k++)
		size *= 1024.0; /* exact: powers of two */
	if (size < 1.0) { /* int() truncates: below 1 byte is 0 */
		rsa_buf_printf(msg, "RSA_%s must be greater than 0, got ", NAME(d));
		rsa_add_quoted(msg, value, strlen(value));
		return -1;
	}
	if (size > MAX_CAPACITY) {
		rsa_buf_printf(msg, "RSA_%s is too large, got ", NAME(d));
		rsa_add_quoted(msg, value, strlen(value));
		return -1;
	}
	rsa_buf_printf(ok, "%llu", (unsigned long long) size);
	return 0;
}

/* Seconds of a duration as directives._DURATION_RE + units.parse_duration read it, or
 * -1 when the text is not a duration. */
static double duration(const char *v)
{
	size_t e = digits(v, 0, 12);
	if (!e)
		return -1;
	/* 30s, 1.5h, 250ms (suffix case-insensitive, ASCII) */
	size_t f = e;
	if (v[f] == '.')
		f = digits(v, f + 1, 12);
	if (f) {
		const char *sfx = v + f;
		double factor = 0;
		char a = (char) (sfx[0] | 0x20), b = sfx[0] ? (char) (sfx[1] | 0x20) : 0;
		if (a == 'm' && b == 's' && !sfx[2])
			factor = 0.001;
		else if (sfx[0] && !sfx[1])
			factor = a == 's' ? 1 : a == 'm' ? 60 : a == 'h' ? 3600 : a == 'd' ? 86400 : 0;
		if (factor) {
			char number[32];
			memcpy(number, v, f);
			number[f] = '\0';
			return strtod(number, NULL) * factor;
		}
	}
	/* Slurm forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS */
	unsigned long long nums[3] = {0, 0, 0}, days = 0;
	int have_days = 0, count = 1;
	nums[0] = strtoull(v, NULL, 10);
	size_t pos = e;
	if (v[pos] == '-') {
		size_t e2 = digits(v, pos + 1, 12);
		if (!e2)
			return -1;
		days = nums[0];
		have_days = 1;
		nums[0] = strtoull(v + pos + 1, NULL, 10);
		pos = e2;
	}
	while (v[pos] == ':' && count < 3) {
		size_t e2 = digits(v, pos + 1, 12);
		if (!e2)
			return -1;
		nums[count++] = strtoull(v + pos + 1, NULL, 10);
		pos = e2;
	}
	if (v[pos])
		return -1;
	if (have_days)
		return (double) (days * 86400 + nums[0] * 3600 + nums[1] * 60 + nums[2]);
	if (count == 1)
		return (double) (nums[0] * 60);
	if (count == 2)
		return (double) (nums[0] * 60 + nums[1]);
	return (double) (nums[0] * 3600 + nums[1] * 60 + nums[2]);
}

/* directives._reset() */
static int parse_reset(int d, const struct rsa_words *ws, struct rsa_buf *ok, struct rsa_buf *msg)
{
	const char *value = one(d, ws, NULL, msg);
	size_t lw;
	if (!value)
		return -1;
	char *lowered = rsa_lower_shape(value, strlen(value), &lw);
	if (!lowered) {
		msg->failed = 1;
		return -1;
	}
	int input_done = lw == 10 && !memcmp(lowered, "input-done", 10);
	free(lowered);
	if (input_done) {
		add_json_string(ok, "input-done");
		return 0;
	}
	double seconds = duration(value);
	if (seconds < 0) {
		rsa_buf_printf(msg, "RSA_%s must be input-done or a duration such as 30s, 10m, 2h or "
			   "HH:MM:SS, got ", NAME(d));
		rsa_add_quoted(msg, value, strlen(value));
		return -1;
	}
	if (seconds < 1 || seconds > MAX_RESET) {
		rsa_buf_printf(msg, "RSA_%s must be between 1s and 365 days, got ", NAME(d));
		rsa_add_quoted(msg, value, strlen(value));
		return -1;
	}
	if (seconds != (double) (unsigned long long) seconds) {
		rsa_buf_printf(msg, "RSA_%s must be whole seconds, got ", NAME(d));
		rsa_add_quoted(msg, value, strlen(value));
		return -1;
	}
	rsa_buf_printf(ok, "\"%llus\"", (unsigned long long) seconds);
	return 0;
}

/* ---------------------------------------------------------------------------------
 * directives._value(): split, then the directive's parser.
 */
static void strip_c_space(const char *s, size_t *from, size_t *to)
{
	size_t i = 0, j = strlen(s);
	while (i < j && strchr(" \t\n\v\f\r", s[i]))
		i++;
	while (j > i && strchr(" \t\n\v\f\r", s[j - 1]))
		j--;
	*from = i;
	*to = j;
}

int rsa_check_value(int d, const char *raw, char **out)
{
	struct rsa_buf ok = {0}, msg = {0};
	struct rsa_words ws;
	int rc = -1;
	*out = NULL;
	if (d < 0 || d >= RSA_NDIRECTIVES || !raw)
		return -1;
	size_t size = strlen(raw);
	if (size > RSA_MAX_LINE) { /* directives._value: never split */
		rsa_buf_printf(&msg, "RSA_%s is %zu bytes long, more than the %d allowed; shorten it",
			       NAME(d), size, RSA_MAX_LINE);
		*out = rsa_buf_take(&msg);
		return -1;
	}
	/* decoded first, as Python does: invalid bytes stay invalid whatever the split does */
	char *value = rsa_escape_invalid(raw, strlen(raw));
	if (!value)
		return -1;
	int sh = rsa_shlex_split(value, &ws);
	if (sh == SH_NOMEM) {
		free(value);
		return -1;
	}
	if (sh == SH_NOESCAPE) {
		rsa_buf_printf(&msg, "RSA_%s ends with a lone backslash; remove it or quote the value",
			   NAME(d));
	} else if (sh == SH_NOCLOSE) {
		size_t from, to;
		strip_c_space(value, &from, &to);
		rsa_buf_printf(&msg, "RSA_%s has an unmatched quote in ", NAME(d));
		rsa_add_quoted(&msg, value + from, to - from);
		rsa_buf_add(&msg, "; close it or escape it with a backslash");
	} else if (!ws.n || (ws.n == 1 && !ws.w[0][0])) {
		rsa_buf_printf(&msg, "RSA_%s has an empty value; write e.g. #RSA_%s=%s", NAME(d),
			   NAME(d), rsa_directives[d].example);
	} else {
		switch (rsa_directives[d].kind) {
		case RSA_KIND_PATH:
			rc = parse_path(d, &ws, &ok, &msg);
			break;
		case RSA_KIND_ARGV:
			rc = parse_argv(d, &ws, &ok, &msg);
			break;
		case RSA_KIND_NODES:
			rc = parse_nodes(d, &ws, &ok, &msg);
			break;
		case RSA_KIND_CAPACITY:
			rc = parse_capacity(d, &ws, &ok, &msg);
			break;
		case RSA_KIND_CHOICE:
			rc = parse_choice(d, &ws, rsa_directives[d].choices, &ok, &msg);
			break;
		case RSA_KIND_RESET:
			rc = parse_reset(d, &ws, &ok, &msg);
			break;
		}
	}
	if (sh == SH_OK)
		rsa_words_free(&ws);
	free(value);
	if (rc == 0) {
		free(msg.s);
		*out = rsa_buf_take(&ok);
		return *out ? 0 : -1;
	}
	free(ok.s);
	*out = rsa_buf_take(&msg);
	return -1;
}

char *rsa_exclusive_options_message(void)
{
	return strdup(RSA_MSG_EXCLUSIVE_OPTIONS);
}
