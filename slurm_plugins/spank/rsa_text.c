/*
 * rsa_text.c - Python's text behaviour in C (see rsa_text.h). Each function mirrors the
 * CPython 3.11 code it names, and its Lua twin in slurm_plugins/job_submit.lua.
 */
#include "rsa_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------
 * A growable string; any allocation failure poisons it (s == NULL) for good.
 */
void rsa_buf_addn(struct rsa_buf *b, const char *p, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *s = realloc(b->s, cap);
		if (!s) {
			free(b->s);
			b->s = NULL;
			b->failed = 1;
			return;
		}
		b->s = s;
		b->cap = cap;
	}
	memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = '\0';
}

void rsa_buf_add(struct rsa_buf *b, const char *p)
{
	rsa_buf_addn(b, p, strlen(p));
}

void rsa_buf_printf(struct rsa_buf *b, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->failed = 1;
		return;
	}
	if ((size_t) n < sizeof(small)) {
		rsa_buf_addn(b, small, (size_t) n);
		return;
	}
	char *big = malloc((size_t) n + 1);
	if (!big) {
		b->failed = 1;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t) n + 1, fmt, ap);
	va_end(ap);
	rsa_buf_addn(b, big, (size_t) n);
	free(big);
}

/* The finished string (malloc()ed, "" for an empty buffer), or NULL after a failure. */
char *rsa_buf_take(struct rsa_buf *b)
{
	if (b->failed)
		return NULL;
	if (!b->s)
		return strdup("");
	return b->s;
}

/* ---------------------------------------------------------------------------------
 * Characters: the UTF-8 character at s[i] is `len` bytes long and valid or not, exactly
 * as Python's strict decoder decides (Unicode Table 3-7); an invalid byte is one
 * character on its own (surrogateescape).
 */
static size_t utf8_char_len(const unsigned char *s, size_t i, size_t n, int *valid)
{
	unsigned char b = s[i];
	size_t len;
	unsigned char lo, hi;
	*valid = 1;
	if (b < 0x80)
		return 1;
	if (b >= 0xC2 && b <= 0xDF) {
		len = 2; lo = 0x80; hi = 0xBF;
	} else if (b == 0xE0) {
		len = 3; lo = 0xA0; hi = 0xBF;
	} else if (b == 0xED) {
		len = 3; lo = 0x80; hi = 0x9F;
	} else if (b >= 0xE1 && b <= 0xEF) {
		len = 3; lo = 0x80; hi = 0xBF;
	} else if (b == 0xF0) {
		len = 4; lo = 0x90; hi = 0xBF;
	} else if (b >= 0xF1 && b <= 0xF3) {
		len = 4; lo = 0x80; hi = 0xBF;
	} else if (b == 0xF4) {
		len = 4; lo = 0x80; hi = 0x8F;
	} else {
		*valid = 0;
		return 1;
	}
	if (i + 1 >= n || s[i + 1] < lo || s[i + 1] > hi) {
		*valid = 0;
		return 1;
	}
	for (size_t k = i + 2; k < i + len; k++) {
		if (k >= n || s[k] < 0x80 || s[k] > 0xBF) {
			*valid = 0;
			return 1;
		}
	}
	return len;
}

/*
 * Python decodes the value before shlex.split() removes quotes and backslashes, so an
 * invalid byte stays one undecodable character even when that removal puts it next to
 * bytes it would make a valid sequence with: b'\xc3"\xa9"' is two characters, not 'é'.
 * rsa_escape_invalid() does the decoding first too: each invalid byte b becomes the
 * three-byte form of its surrogate escape U+DC00+b (ED B2|B3 xx), which no valid text
 * contains, which shlex passes through, and which rsa_char_len() reads back as one
 * invalid character standing for b (rsa_char_byte()).
 */
static int is_escape(const unsigned char *s, size_t i, size_t n)
{
	return s[i] == 0xED && i + 2 < n && (s[i + 1] == 0xB2 || s[i + 1] == 0xB3) &&
	       s[i + 2] >= 0x80 && s[i + 2] <= 0xBF;
}

char *rsa_escape_invalid(const char *text, size_t n)
{
	const unsigned char *s = (const unsigned char *) text;
	struct rsa_buf b = {0};
	for (size_t i = 0; i < n;) {
		int valid;
		size_t len = utf8_char_len(s, i, n, &valid);
		if (valid) {
			rsa_buf_addn(&b, text + i, len);
		} else {
			char esc[3] = {(char) 0xED, (char) (0xB0 | (s[i] >> 6)),
				       (char) (0x80 | (s[i] & 0x3F))};
			rsa_buf_addn(&b, esc, 3);
		}
		i += len;
	}
	return rsa_buf_take(&b);
}

size_t rsa_char_len(const unsigned char *s, size_t i, size_t n, int *valid)
{
	if (is_escape(s, i, n)) {
		*valid = 0;
		return 3;
	}
	return utf8_char_len(s, i, n, valid);
}

unsigned char rsa_char_byte(const unsigned char *s, size_t i, size_t n)
{
	if (is_escape(s, i, n))
		return (unsigned char) (((s[i + 1] & 0x03) << 6) | (s[i + 2] & 0x3F));
	return s[i];
}

/* directives.quote(): user text in single quotes, one line, cut after RSA_QUOTE_MAX
 * characters. */
void rsa_add_quoted(struct rsa_buf *b, const char *text, size_t n)
{
	const unsigned char *s = (const unsigned char *) text;
	size_t count = 0;
	rsa_buf_add(b, "'");
	for (size_t i = 0; i < n; count++) {
		int valid;
		if (count == RSA_QUOTE_MAX) { /* cut: "..." after the closing quote */
			rsa_buf_add(b, "'...");
			return;
		}
		size_t len = rsa_char_len(s, i, n, &valid);
		if (!valid || s[i] < 0x20 || s[i] == 0x7F)
			rsa_buf_printf(b, "\\x%02x", rsa_char_byte(s, i, n));
		else if (s[i] == '\\' || s[i] == '\'')
			rsa_buf_printf(b, "\\%c", s[i]);
		else if (s[i] == 0xC2 && s[i + 1] <= 0x9F) /* C1 control U+0080..U+009F */
			rsa_buf_printf(b, "\\x%02x", s[i + 1]);
		else
			rsa_buf_addn(b, text + i, len);
		i += len;
	}
	rsa_buf_add(b, "'");
}

/* directives._undecodable(): the first byte that is not valid UTF-8, or -1. */
int rsa_undecodable(const char *text, size_t n)
{
	const unsigned char *s = (const unsigned char *) text;
	for (size_t i = 0; i < n;) {
		int valid;
		size_t len = rsa_char_len(s, i, n, &valid);
		if (!valid)
			return rsa_char_byte(s, i, n);
		i += len;
	}
	return -1;
}

/* directives._is_control() over valid UTF-8 text */
int rsa_has_control(const char *text, size_t n)
{
	const unsigned char *s = (const unsigned char *) text;
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] == 0x7F || (s[i] == 0xC2 && i + 1 < n && s[i + 1] <= 0x9F))
			return 1;
	return 0;
}

/*
 * The "shape" of str.lower(): one byte per character of Python's result, ASCII kept,
 * every other character 0 (it never equals a choice's character). str.lower() maps only
 * two non-ASCII characters to ASCII: U+212A KELVIN SIGN -> "k", U+0130 -> "i" U+0307.
 */
char *rsa_lower_shape(const char *text, size_t n, size_t *out_len)
{
	const unsigned char *s = (const unsigned char *) text;
	char *out = malloc(2 * n + 1);
	size_t o = 0;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		int valid;
		size_t len = rsa_char_len(s, i, n, &valid);
		if (len == 1 && valid) {
			out[o++] = (s[i] >= 'A' && s[i] <= 'Z') ? (char) (s[i] + 32) : (char) s[i];
		} else if (valid && len == 3 && s[i] == 0xE2 && s[i + 1] == 0x84 && s[i + 2] == 0xAA) {
			out[o++] = 'k';
		} else if (valid && len == 2 && s[i] == 0xC4 && s[i + 1] == 0xB0) {
			out[o++] = 'i';
			out[o++] = '\0';
		} else {
			out[o++] = '\0';
		}
		i += len;
	}
	out[o] = '\0';
	*out_len = o;
	return out;
}

/* ---------------------------------------------------------------------------------
 * difflib.get_close_matches(word, choices, n=1, cutoff=0.6) of CPython 3.11, for short
 * ASCII choices (a = choice, b = word). No junk: autojunk needs a word of 200+
 * characters, which real_quick_ratio already rules out against choices this short.
 */
static size_t matching_chars(const char *a, size_t la, const char *b, size_t lb)
{
	size_t total = 0;
	size_t stack[64][4];
	int top = 0;
	size_t *j2len = calloc(lb + 1, sizeof(size_t));
	size_t *newj2len = calloc(lb + 1, sizeof(size_t));
	if (!j2len || !newj2len) {
		free(j2len);
		free(newj2len);
		return 0;
	}
	stack[top][0] = 0; stack[top][1] = la; stack[top][2] = 0; stack[top][3] = lb;
	top++;
	while (top > 0) {
		top--;
		size_t alo = stack[top][0], ahi = stack[top][1];
		size_t blo = stack[top][2], bhi = stack[top][3];
		size_t besti = alo, bestj = blo, bestsize = 0;
		/* j2len[j + 1] holds the previous row's run ending at b[j] */
		memset(j2len, 0, (lb + 1) * sizeof(size_t));
		for (size_t i = alo; i < ahi; i++) {
			memset(newj2len, 0, (lb + 1) * sizeof(size_t));
			for (size_t j = blo; j < bhi; j++) {
				if (b[j] != a[i])
					continue;
				size_t k = j2len[j] + 1;
				newj2len[j + 1] = k;
				if (k > bestsize) {
					besti = i + 1 - k;
					bestj = j + 1 - k;
					bestsize = k;
				}
			}
			size_t *t = j2len;
			j2len = newj2len;
			newj2len = t;
		}
		if (bestsize > 0) {
			total += bestsize;
			if (alo < besti && blo < bestj && top < 63) {
				stack[top][0] = alo; stack[top][1] = besti;
				stack[top][2] = blo; stack[top][3] = bestj;
				top++;
			}
			if (besti + bestsize < ahi && bestj + bestsize < bhi && top < 63) {
				stack[top][0] = besti + bestsize; stack[top][1] = ahi;
				stack[top][2] = bestj + bestsize; stack[top][3] = bhi;
				top++;
			}
		}
	}
	free(j2len);
	free(newj2len);
	return total;
}

const char *rsa_close_match(const char *word, size_t lw, const char *const *choices)
{
	const char *best = NULL;
	double best_score = 0.0;
	for (int c = 0; choices[c]; c++) {
		size_t lx = strlen(choices[c]);
		double length = (double) (lx + lw);
		double quick = 2.0 * (double) (lx < lw ? lx : lw) / length;
		if (quick < 0.6)
			continue;
		double score = 2.0 * (double) matching_chars(choices[c], lx, word, lw) / length;
		if (score >= 0.6 && (!best || score > best_score ||
				     (score == best_score && strcmp(choices[c], best) > 0))) {
			best = choices[c];
			best_score = score;
		}
	}
	return best;
}

/* ---------------------------------------------------------------------------------
 * shlex.split(s) (POSIX mode, no comments) of CPython 3.11: whitespace " \t\r\n",
 * '...', "..." (backslash escapes only " and \ inside), \x outside quotes.
 */
void rsa_words_free(struct rsa_words *ws)
{
	for (size_t k = 0; k < ws->n; k++)
		free(ws->w[k]);
	free(ws->w);
	ws->w = NULL;
	ws->n = 0;
}

static int is_shlex_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int rsa_shlex_split(const char *s, struct rsa_words *out)
{
	size_t pos = 0, n = strlen(s);
	int state = ' '; /* ' ', 'a', '\'', '"', '\\', or 0 at the end */
	out->w = NULL;
	out->n = 0;
	while (state) {
		struct rsa_buf token = {0};
		int quoted = 0, escapedstate = ' ';
		for (;;) {
			int c = pos < n ? (unsigned char) s[pos] : -1;
			pos++;
			if (state == ' ') {
				if (c < 0) {
					state = 0;
					break;
				} else if (is_shlex_space((char) c)) {
					if (token.len || quoted)
						break;
				} else if (c == '\\') {
					escapedstate = 'a';
					state = c;
				} else if (c == '\'' || c == '"') {
					state = c;
				} else {
					char ch = (char) c;
					rsa_buf_addn(&token, &ch, 1);
					state = 'a';
				}
			} else if (state == '\'' || state == '"') {
				quoted = 1;
				if (c < 0) {
					free(token.s);
					rsa_words_free(out);
					return SH_NOCLOSE;
				}
				if (c == state) {
					state = 'a';
				} else if (c == '\\' && state == '"') {
					escapedstate = state;
					state = c;
				} else {
					char ch = (char) c;
					rsa_buf_addn(&token, &ch, 1);
				}
			} else if (state == '\\') {
				if (c < 0) {
					free(token.s);
					rsa_words_free(out);
					return SH_NOESCAPE;
				}
				if ((escapedstate == '\'' || escapedstate == '"') && c != state &&
				    c != escapedstate) {
					char ch = (char) state;
					rsa_buf_addn(&token, &ch, 1);
				}
				char ch = (char) c;
				rsa_buf_addn(&token, &ch, 1);
				state = escapedstate;
			} else { /* 'a' */
				if (c < 0) {
					state = 0;
					break;
				} else if (is_shlex_space((char) c)) {
					state = ' ';
					if (token.len || quoted)
						break;
				} else if (c == '\'' || c == '"') {
					state = c;
				} else if (c == '\\') {
					escapedstate = 'a';
					state = c;
				} else {
					char ch = (char) c;
					rsa_buf_addn(&token, &ch, 1);
				}
			}
		}
		if (!token.len && !quoted) {
			free(token.s);
			break;
		}
		char *word = rsa_buf_take(&token);
		char **w = word ? realloc(out->w, (out->n + 1) * sizeof(char *)) : NULL;
		if (!w) {
			free(word);
			rsa_words_free(out);
			return SH_NOMEM;
		}
		out->w = w;
		out->w[out->n++] = word;
	}
	return SH_OK;
}
