/*
 * rsa_text.h - Python's text behaviour in C, for rsa_grammar.c: a growable string,
 * UTF-8 characters as Python's surrogateescape decoder sees them, directives.quote(),
 * the shape of str.lower(), difflib.get_close_matches() for short ASCII choices and
 * shlex.split() (POSIX). Internal to the plugin; no Slurm headers, no I/O.
 */
#ifndef RSA_TEXT_H
#define RSA_TEXT_H

#include <stddef.h>

/* Bounds shared with directives.py and job_submit.lua: the longest value checked (bytes;
 * a longer one is refused without being split) and the characters of user text quoted. */
/* BEGIN GENERATED: limits */
/* generated from rsa_scheduler/core/grammar.py by `make grammar`; do not edit */
#define RSA_MAX_LINE 16384
#define RSA_QUOTE_MAX 200
/* END GENERATED: limits */

/* A growable string; any allocation failure poisons it (s == NULL) for good. */
struct rsa_buf {
	char *s;
	size_t len, cap;
	int failed;
};

void rsa_buf_addn(struct rsa_buf *b, const char *p, size_t n);
void rsa_buf_add(struct rsa_buf *b, const char *p);
void rsa_buf_printf(struct rsa_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The finished string (malloc()ed, "" for an empty buffer), or NULL after a failure. */
char *rsa_buf_take(struct rsa_buf *b);

/* Python's decoding before splitting: each invalid byte of text as a three-byte escape
 * that stays one invalid character whatever ends up next to it (malloc()ed, or NULL). */
char *rsa_escape_invalid(const char *text, size_t n);
/* Length of the character at s[i] and whether it is valid (Python's decoder; an escape
 * of rsa_escape_invalid() is one invalid character), and the byte an invalid one is. */
size_t rsa_char_len(const unsigned char *s, size_t i, size_t n, int *valid);
unsigned char rsa_char_byte(const unsigned char *s, size_t i, size_t n);
/* directives.quote(): user text in single quotes, one line. */
void rsa_add_quoted(struct rsa_buf *b, const char *text, size_t n);
/* directives._undecodable(): the first byte that is not valid UTF-8, or -1. */
int rsa_undecodable(const char *text, size_t n);
/* directives._is_control() over valid UTF-8 text */
int rsa_has_control(const char *text, size_t n);
/* One byte per character of str.lower(): ASCII kept, anything else 0 (malloc()ed). */
char *rsa_lower_shape(const char *text, size_t n, size_t *out_len);
/* difflib.get_close_matches(word, choices, n=1, cutoff=0.6)[0], or NULL. */
const char *rsa_close_match(const char *word, size_t lw, const char *const *choices);

struct rsa_words {
	char **w;
	size_t n;
};

enum { SH_OK = 0, SH_NOCLOSE = 1, SH_NOESCAPE = 2, SH_NOMEM = 3 };

/* shlex.split(s): SH_OK and the words (free with words_free), or an SH_* error. */
int rsa_shlex_split(const char *s, struct rsa_words *out);
void rsa_words_free(struct rsa_words *ws);

#endif
