--[[ rsa_grammar.lua — the #RSA_* directive grammar's data, for job_submit.lua.

Generated: everything between the markers is written by `make grammar`
(python -m rsa_scheduler.grammargen) from rsa_scheduler/core/grammar.py, the one source of
the grammar's data; tests/unit/test_grammar.py fails when it is stale. Do not edit it by
hand. job_submit.lua loads this file from its own directory at load time and gives the
table it returns to rsa_text.lua and rsa_directives.lua. Data only: no function, no I/O.
]]

-- BEGIN GENERATED: grammar
-- generated from rsa_scheduler/core/grammar.py by `make grammar`; do not edit
return {
  PREFIX = "#RSA_",
  ADMIN_COMMENT_PREFIX = "rsa1:",
  PATH_MAX = 4096,
  NAME_MAX = 255,
  MAX_NODES = 2147483647,
  MAX_CAPACITY = 9007199254740992,
  MAX_RESET = 31536000,
  MAX_LINE = 16384,
  MAX_ERRORS = 20,
  MAX_SCRIPT = 4194304,
  QUOTE_MAX = 200,
  MSG_BOM = "script starts with a byte order mark (BOM); save it as UTF-8 without BOM",
  MSG_CRLF = "script contains DOS line breaks (\\r\\n) instead of expected UNIX line "
    .. "breaks (\\n); convert it with dos2unix",
  MSG_NUL = "script contains a NULL character '\\0', which Slurm does not allow; remove "
    .. "it",
  MSG_TOO_FAR = "#RSA_ line starts after the first 4194304 bytes of the script, where "
    .. "checking stops; move the #RSA_ lines to the top",
  MSG_TOO_MANY = "more than 20 errors, checking stopped at this line; fix the ones above "
    .. "and submit again",
  MSG_NO_NAME = "directive name missing after #RSA_; write e.g. #RSA_DATA_IN=/path/to/input",
  -- in declaration order: { name, value kind, example for an empty value,
  --   admin_comment key[, choices] }
  GRAMMAR = {
    { "DATA_IN", "path", "/gpfs/alice/input", "i" },
    { "DATA_OUT", "path", "/gpfs/alice/output", "o" },
    { "PREPROCESS", "argv", "/home/alice/bin/unpack.sh --fast", "pre" },
    { "POSTPROCESS", "argv", "/home/alice/bin/pack.sh out.tar", "post" },
    { "NODES", "nodes", "2", "n" },
    { "TIER", "choice", "ram", "t", { "ram", "ssd", "auto" } },
    { "CAPACITY", "capacity", "512G", "c" },
    { "STAGE_OUT", "choice", "rsync", "so", { "rsync", "tar" } },
    { "EARLY_START", "choice", "fallback", "es", { "fallback", "wait", "union" } },
    { "INPUT", "choice", "ro", "im", { "ro", "rw" } },
    { "RESET", "reset", "input-done", "r" },
  },
}
-- END GENERATED: grammar
