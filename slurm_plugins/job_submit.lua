--[[ job_submit.lua — rsa-scheduler's Slurm job_submit/lua plugin (Slurm 22.05, Lua 5.1).

What it owns
  * slurm_job_submit: reads the #RSA_* directives of a batch script with EXACTLY the
    grammar of `rsa directives check` (rsa_scheduler/core/directives.py is the reference;
    tests/data/directives/ holds the shared vectors this file must pass). A bad script is
    refused with one `LINE: message` line per error (slurm.log_user + slurm.ERROR); a good
    one gets its normalised spec written to job_desc.admin_comment in the `rsa1:` encoding
    of DirectiveSpec.to_admin_comment(), byte for byte. Jobs without directives are untouched.
    --rsa-* options (the SPANK plugin in slurm_plugins/spank, passed in
    job_desc.spank_job_env as RSA_<NAME>=<value>) are merged with the script's directives
    exactly as directives.check_submission() does: same checks, a differing duplicate is
    an error naming both, salloc/srun jobs with options get an admin_comment too.
  * slurm_job_modify: users cannot undo a lock-in. While a job's QOS is the lock-in QOS,
    only root and SlurmUser may change its qos, priority or nice.

Rules for this file (docs/job_submit.md, /work/shared/style.md): it runs inside slurmctld
under its locks, so it is pure string work — no I/O, no os.execute, no require, no
globals besides the two Slurm entry points and `rsa_job_submit` (tests). Lua 5.1 syntax
and library only (Debian's job_submit_lua.so links liblua5.1); it also runs on 5.2–5.4.
Strings are bytes: UTF-8 is decoded by hand where Python's str semantics matter (user text
is decoded once on entry, invalid bytes kept as surrogate escapes: see decode()).
]]

-- ---------------------------------------------------------------------------------------
-- Site configuration

local CONFIG = {
  -- QOS the RSA daemon gives a job after stage-in (rsa config: slurm.lockin.qos).
  lockin_qos = "rsa-lockin",
  -- Priority-mode lock-in (rsa config: slurm.lockin.method=priority): a job whose priority
  -- is at least this is treated as locked in too. nil = off (with priority/multifactor,
  -- ordinary priorities can be large; only set it if the lock-in value is above them all).
  lockin_priority = nil,
  -- uid of SlurmUser (`id -u slurm`); root (uid 0) is always privileged.
  slurm_user_uid = nil,
  -- Early-start policy of jobs that do not choose one (rsa config: staging.early_start;
  -- keep the two equal). With `wait`, an RSA job is held at submission (its begin time
  -- set to now + wait_timeout, " hold=<deadline>" appended to its admin_comment) until
  -- rsad has its RAMDISK ready and releases it; Slurm releases it by itself at the
  -- deadline (docs/architecture.md, "Holding a job until its RAMDISK is ready").
  early_start = "wait",
  -- Seconds a job may be held for its RAMDISK (rsa config: staging.wait_timeout).
  wait_timeout = 1800,
  -- The clock (seconds since the epoch; tests replace it). Reading it is no I/O.
  now = os.time,
  -- Native mode (rsa config: slurm.mode=native, docs/design/native-mode.md): the
  -- burst_buffer.conf Directive= word (Slurm's default "BB_LUA"). An RSA job then gets a
  -- "#BB_LUA" line (job_desc.burst_buffer) unless it has one, so Slurm's burst_buffer/lua
  -- hooks stage it; no start hold (Slurm holds it in stage-in). nil = queue mode.
  bb_directive = nil,
  -- Native mode: the burst buffer pool (an RSA tier rsad reports: ram, ssd) the "#BB_LUA"
  -- line names for a job that asks for no tier, or for `auto` (rsa config:
  -- allocation.default_tier, when it is a node tier). The line asks for
  -- "pool=<tier> capacity=<#RSA_CAPACITY, else 1M>" so Slurm sizes the job: its
  -- real_size hook then raises the size to the RSA nodes rsad gave it, the bb/lua TRES.
  bb_pool = "ram",
}

local unpack = unpack or table.unpack -- luacheck: ignore (5.1 global vs 5.2+ table field)

-- ---------------------------------------------------------------------------------------
-- The grammar's data (rsa_scheduler/core/grammar.py): limits, fixed messages, directives
-- BEGIN GENERATED: grammar
-- generated from rsa_scheduler/core/grammar.py by `make grammar`; do not edit
local PREFIX = "#RSA_"
local ADMIN_COMMENT_PREFIX = "rsa1:"
local PATH_MAX = 4096
local NAME_MAX = 255
local MAX_NODES = 2147483647
local MAX_CAPACITY = 9007199254740992
local MAX_RESET = 31536000
local MAX_LINE = 16384
local MAX_ERRORS = 20
local MAX_SCRIPT = 4194304
local QUOTE_MAX = 200
local MSG_BOM = "script starts with a byte order mark (BOM); save it as UTF-8 without BOM"
local MSG_CRLF = "script contains DOS line breaks (\\r\\n) instead of expected UNIX line breaks "
  .. "(\\n); convert it with dos2unix"
local MSG_NUL = "script contains a NULL character '\\0', which Slurm does not allow; remove it"
local MSG_TOO_FAR = "#RSA_ line starts after the first 4194304 bytes of the script, where "
  .. "checking stops; move the #RSA_ lines to the top"
local MSG_TOO_MANY = "more than 20 errors, checking stopped at this line; fix the ones above and "
  .. "submit again"
local MSG_NO_NAME = "directive name missing after #RSA_; write e.g. #RSA_DATA_IN=/path/to/input"
-- in declaration order: { name, value kind, example for an empty value,
--   admin_comment key[, choices] }
local GRAMMAR = {
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
}
-- END GENERATED: grammar

-- C isspace() in the "C" locale (what sbatch and directives.C_SPACE use)
local C_SPACE = { [32] = true, [9] = true, [10] = true, [11] = true, [12] = true, [13] = true }
-- shlex whitespace (POSIX mode): no \v or \f
local SHLEX_SPACE = { [32] = true, [9] = true, [13] = true, [10] = true }

-- Uppercase shapes of non-ASCII characters whose str.upper() is not one non-ASCII
-- character (Python 3.11 full case mapping). Only what difflib can see matters: ASCII
-- stays, every other character is "\0" (it never equals a known name's character).
-- Generated with: for c: s = chr(c).upper(); if len(s) != 1 or any ASCII in s: keep.
local UPPER_SPECIAL_LIST = {
  0xDF,"SS", 0x131,"I", 0x149,"\0N", 0x17F,"S", 0x1F0,"J\0", 0x390,"\0\0\0",
  0x3B0,"\0\0\0", 0x587,"\0\0", 0x1E96,"H\0", 0x1E97,"T\0", 0x1E98,"W\0", 0x1E99,"Y\0",
  0x1E9A,"A\0", 0x1F50,"\0\0", 0x1F52,"\0\0\0", 0x1F54,"\0\0\0", 0x1F56,"\0\0\0",
  0x1F80,"\0\0", 0x1F81,"\0\0", 0x1F82,"\0\0", 0x1F83,"\0\0", 0x1F84,"\0\0", 0x1F85,"\0\0",
  0x1F86,"\0\0", 0x1F87,"\0\0", 0x1F88,"\0\0", 0x1F89,"\0\0", 0x1F8A,"\0\0", 0x1F8B,"\0\0",
  0x1F8C,"\0\0", 0x1F8D,"\0\0", 0x1F8E,"\0\0", 0x1F8F,"\0\0", 0x1F90,"\0\0", 0x1F91,"\0\0",
  0x1F92,"\0\0", 0x1F93,"\0\0", 0x1F94,"\0\0", 0x1F95,"\0\0", 0x1F96,"\0\0", 0x1F97,"\0\0",
  0x1F98,"\0\0", 0x1F99,"\0\0", 0x1F9A,"\0\0", 0x1F9B,"\0\0", 0x1F9C,"\0\0", 0x1F9D,"\0\0",
  0x1F9E,"\0\0", 0x1F9F,"\0\0", 0x1FA0,"\0\0", 0x1FA1,"\0\0", 0x1FA2,"\0\0", 0x1FA3,"\0\0",
  0x1FA4,"\0\0", 0x1FA5,"\0\0", 0x1FA6,"\0\0", 0x1FA7,"\0\0", 0x1FA8,"\0\0", 0x1FA9,"\0\0",
  0x1FAA,"\0\0", 0x1FAB,"\0\0", 0x1FAC,"\0\0", 0x1FAD,"\0\0", 0x1FAE,"\0\0", 0x1FAF,"\0\0",
  0x1FB2,"\0\0", 0x1FB3,"\0\0", 0x1FB4,"\0\0", 0x1FB6,"\0\0", 0x1FB7,"\0\0\0",
  0x1FBC,"\0\0", 0x1FC2,"\0\0", 0x1FC3,"\0\0", 0x1FC4,"\0\0", 0x1FC6,"\0\0",
  0x1FC7,"\0\0\0", 0x1FCC,"\0\0", 0x1FD2,"\0\0\0", 0x1FD3,"\0\0\0", 0x1FD6,"\0\0",
  0x1FD7,"\0\0\0", 0x1FE2,"\0\0\0", 0x1FE3,"\0\0\0", 0x1FE4,"\0\0", 0x1FE6,"\0\0",
  0x1FE7,"\0\0\0", 0x1FF2,"\0\0", 0x1FF3,"\0\0", 0x1FF4,"\0\0", 0x1FF6,"\0\0",
  0x1FF7,"\0\0\0", 0x1FFC,"\0\0", 0xFB00,"FF", 0xFB01,"FI", 0xFB02,"FL", 0xFB03,"FFI",
  0xFB04,"FFL", 0xFB05,"ST", 0xFB06,"ST", 0xFB13,"\0\0", 0xFB14,"\0\0", 0xFB15,"\0\0",
  0xFB16,"\0\0", 0xFB17,"\0\0",
}

local function utf8_encode(cp)
  if cp < 0x80 then
    return string.char(cp)
  elseif cp < 0x800 then
    return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64)
  elseif cp < 0x10000 then
    return string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64,
      0x80 + cp % 64)
  end
  return string.char(0xF0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64,
    0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end

local UPPER_SPECIAL = {}
for k = 1, #UPPER_SPECIAL_LIST, 2 do
  UPPER_SPECIAL[utf8_encode(UPPER_SPECIAL_LIST[k])] = UPPER_SPECIAL_LIST[k + 1]
end
-- str.lower() exceptions: U+0130 -> "i" + U+0307, KELVIN SIGN U+212A -> "k"
local LOWER_SPECIAL = { [utf8_encode(0x130)] = "i\0", [utf8_encode(0x212A)] = "k" }

-- ---------------------------------------------------------------------------------------
-- Characters: Python decodes the script as UTF-8 with surrogateescape, so each byte of an
-- invalid sequence is one "character". utf8_len returns the length in bytes of the
-- character starting at byte i and whether it is valid UTF-8 (well-formed per Unicode
-- Table 3-7, exactly what Python's strict decoder accepts).
--
-- Python decodes BEFORE shlex.split removes quotes and backslashes, so an invalid byte
-- stays one undecodable character even when that removal puts it next to bytes it would
-- make a valid sequence with: b'/a\xd4\\\xb2' is '/a' and two undecodable characters,
-- not '/a\u0532'. decode() does the same, first: each invalid byte b becomes the three
-- bytes of its surrogate escape U+DC00+b (ED B2 xx or ED B3 xx), which valid UTF-8 never
-- contains and shlex_split passes through whole. All user text is decoded once where it
-- enters (directive(), check()'s options); from then on char_len reads an escape as one
-- invalid character and invalid_byte gives the byte it stands for.

local function utf8_len(s, i)
  local b = s:byte(i)
  if b < 0x80 then return 1 end
  local n, lo, hi
  if b >= 0xC2 and b <= 0xDF then n, lo, hi = 2, 0x80, 0xBF
  elseif b == 0xE0 then n, lo, hi = 3, 0xA0, 0xBF
  elseif b == 0xED then n, lo, hi = 3, 0x80, 0x9F
  elseif b >= 0xE1 and b <= 0xEF then n, lo, hi = 3, 0x80, 0xBF
  elseif b == 0xF0 then n, lo, hi = 4, 0x90, 0xBF
  elseif b >= 0xF1 and b <= 0xF3 then n, lo, hi = 4, 0x80, 0xBF
  elseif b == 0xF4 then n, lo, hi = 4, 0x80, 0x8F
  else return 1, false end
  local c = s:byte(i + 1)
  if not c or c < lo or c > hi then return 1, false end
  for k = i + 2, i + n - 1 do
    c = s:byte(k)
    if not c or c < 0x80 or c > 0xBF then return 1, false end
  end
  return n, true
end

local function is_escape(s, i) -- the surrogate escape decode() writes for an invalid byte
  if s:byte(i) ~= 0xED then return false end
  local b2, b3 = s:byte(i + 1, i + 2)
  return (b2 == 0xB2 or b2 == 0xB3) and b3 ~= nil and b3 >= 0x80 and b3 <= 0xBF
end

-- directives.decode_script(): bytes to text, each invalid byte as its surrogate escape
local function decode(s)
  if not s:find("[\128-\255]") then return s end
  local out, i = {}, 1
  while i <= #s do
    local n, valid = utf8_len(s, i)
    if valid == false then
      local b = s:byte(i)
      out[#out + 1] = string.char(0xED, 0xB0 + math.floor(b / 64), 0x80 + b % 64)
    else
      out[#out + 1] = s:sub(i, i + n - 1)
    end
    i = i + n
  end
  return table.concat(out)
end

-- Length of the character at byte i of decoded text and whether it is valid
local function char_len(s, i)
  if is_escape(s, i) then return 3, false end
  return utf8_len(s, i)
end

-- The byte an invalid character (as chars() returns it) stands for
local function invalid_byte(ch)
  if #ch == 3 then return (ch:byte(2) - 0xB0) * 64 + ch:byte(3) - 0x80 end
  return ch:byte(1)
end

-- Iterate the characters of decoded text: for i, ch, valid in chars(s)
local function chars(s)
  local i = 1
  return function()
    if i > #s then return nil end
    local n, valid = char_len(s, i)
    if n == 1 and valid == nil then valid = true end
    local start = i
    i = i + n
    return start, s:sub(start, start + n - 1), valid
  end
end

-- directives.quote(): user text in single quotes, one line, escapes as Python writes them
local function quote(text)
  local out, count, tail = {}, 0, ""
  for _, ch, valid in chars(text) do
    count = count + 1
    if count > QUOTE_MAX then -- cut: "..." after the closing quote
      tail = "..."
      break
    end
    local b = ch:byte(1)
    if not valid then
      out[#out + 1] = string.format("\\x%02x", invalid_byte(ch))
    elseif ch == "\\" or ch == "'" then
      out[#out + 1] = "\\" .. ch
    elseif b < 0x20 or b == 0x7F then
      out[#out + 1] = string.format("\\x%02x", b)
    elseif b == 0xC2 and ch:byte(2) <= 0x9F then -- U+0080..U+009F (C1 controls)
      out[#out + 1] = string.format("\\x%02x", ch:byte(2))
    else
      out[#out + 1] = ch
    end
  end
  return "'" .. table.concat(out) .. "'" .. tail
end

-- directives._undecodable(): the first byte that is not valid UTF-8, as "0xNN", or nil
local function undecodable(text)
  for _, ch, valid in chars(text) do
    if not valid then return string.format("0x%02x", invalid_byte(ch)) end
  end
  return nil
end

-- Case-mapped "shape" of a string: one byte per character of Python's str.upper()/lower(),
-- ASCII kept, anything else "\0". Enough for equality with ASCII words and for difflib.
local function shape(text, upper)
  local out = {}
  for _, ch, valid in chars(text) do
    local b = ch:byte(1)
    if #ch == 1 and valid then
      if upper and b >= 97 and b <= 122 then ch = string.char(b - 32)
      elseif not upper and b >= 65 and b <= 90 then ch = string.char(b + 32) end
      out[#out + 1] = ch
    elseif valid then
      out[#out + 1] = (upper and UPPER_SPECIAL or LOWER_SPECIAL)[ch] or "\0"
    else
      out[#out + 1] = "\0"
    end
  end
  return table.concat(out)
end

local function lstrip_c(s)
  local i = 1
  while i <= #s and C_SPACE[s:byte(i)] do i = i + 1 end
  return s:sub(i)
end

local function strip_c(s)
  local j = #s
  while j >= 1 and C_SPACE[s:byte(j)] do j = j - 1 end
  return lstrip_c(s:sub(1, j))
end

-- ---------------------------------------------------------------------------------------
-- difflib.get_close_matches(word, possibilities, n=1, cutoff=0.6), ported from CPython
-- 3.11 SequenceMatcher (a = possibility, b = word; no junk: autojunk only applies to
-- words of 200+ characters, which real_quick_ratio already rules out).

local function matches(a, b)
  local b2j = {}
  for j = 0, #b - 1 do
    local c = b:sub(j + 1, j + 1)
    local list = b2j[c]
    if not list then list = {}; b2j[c] = list end
    list[#list + 1] = j
  end
  local function longest(alo, ahi, blo, bhi)
    local besti, bestj, bestsize = alo, blo, 0
    local j2len = {}
    for i = alo, ahi - 1 do
      local newj2len = {}
      local list = b2j[a:sub(i + 1, i + 1)]
      if list then
        for _, j in ipairs(list) do
          if j >= blo then
            if j >= bhi then break end
            local k = (j2len[j - 1] or 0) + 1
            newj2len[j] = k
            if k > bestsize then besti, bestj, bestsize = i - k + 1, j - k + 1, k end
          end
        end
      end
      j2len = newj2len
    end
    while besti > alo and bestj > blo and a:sub(besti, besti) == b:sub(bestj, bestj) do
      besti, bestj, bestsize = besti - 1, bestj - 1, bestsize + 1
    end
    while besti + bestsize < ahi and bestj + bestsize < bhi
      and a:sub(besti + bestsize + 1, besti + bestsize + 1)
        == b:sub(bestj + bestsize + 1, bestj + bestsize + 1) do
      bestsize = bestsize + 1
    end
    return besti, bestj, bestsize
  end
  local total = 0
  local queue = { { 0, #a, 0, #b } }
  while #queue > 0 do
    local alo, ahi, blo, bhi = unpack(table.remove(queue))
    local i, j, k = longest(alo, ahi, blo, bhi)
    if k > 0 then
      total = total + k
      if alo < i and blo < j then queue[#queue + 1] = { alo, i, blo, j } end
      if i + k < ahi and j + k < bhi then queue[#queue + 1] = { i + k, ahi, j + k, bhi } end
    end
  end
  return total
end

local function ratio(m, length)
  if length == 0 then return 1.0 end
  return 2.0 * m / length
end

-- Python compares str by code point; these words are ASCII, so compare bytes (not strcoll).
local function str_gt(x, y)
  for k = 1, math.min(#x, #y) do
    local p, q = x:byte(k), y:byte(k)
    if p ~= q then return p > q end
  end
  return #x > #y
end

local function close_match(word, possibilities)
  local best, best_score
  for _, x in ipairs(possibilities) do
    local length = #x + #word
    if ratio(math.min(#x, #word), length) >= 0.6 then -- real_quick_ratio
      local score = ratio(matches(x, word), length)
      if score >= 0.6 and (not best or score > best_score
          or (score == best_score and str_gt(x, best))) then
        best, best_score = x, score
      end
    end
  end
  return best
end

-- ---------------------------------------------------------------------------------------
-- shlex.split(s) (POSIX mode, comments off) of CPython 3.11, in time linear in #s: runs
-- of ordinary characters and quoted text are taken with string.find and joined once
-- (appending a byte at a time would copy the word again for each byte: quadratic, and
-- this runs inside slurmctld). Returns the words, or nil and shlex's message: "No
-- closing quotation" / "No escaped character".

local function shlex_split(s)
  local words, len = {}, #s
  local pos = s:find("[^ \t\r\n]") or len + 1
  while pos <= len do
    local parts = {}
    while pos <= len do
      local c = s:sub(pos, pos)
      if SHLEX_SPACE[c:byte()] then break end
      if c == "'" then -- everything up to the next ' as it is
        local e = s:find("'", pos + 1, true)
        if not e then return nil, "No closing quotation" end
        parts[#parts + 1] = s:sub(pos + 1, e - 1)
        pos = e + 1
      elseif c == '"' then -- a backslash escapes only " and itself
        pos = pos + 1
        while true do
          local e = s:find('["\\]', pos)
          if not e then return nil, "No closing quotation" end
          parts[#parts + 1] = s:sub(pos, e - 1)
          if s:sub(e, e) == '"' then
            pos = e + 1
            break
          end
          if e == len then return nil, "No escaped character" end
          local nxt = s:sub(e + 1, e + 1)
          parts[#parts + 1] = (nxt == '"' or nxt == "\\") and nxt or "\\" .. nxt
          pos = e + 2
        end
      elseif c == "\\" then -- outside quotes: the next byte as it is
        if pos == len then return nil, "No escaped character" end
        parts[#parts + 1] = s:sub(pos + 1, pos + 1)
        pos = pos + 2
      else
        local _, e = s:find("^[^ \t\r\n'\"\\]+", pos)
        parts[#parts + 1] = s:sub(pos, e)
        pos = e + 1
      end
    end
    words[#words + 1] = table.concat(parts) -- never an unquoted "": it starts with a byte
    pos = s:find("[^ \t\r\n]", pos) or len + 1
  end
  return words
end

-- ---------------------------------------------------------------------------------------
-- Value parsers: (name, words) -> canonical text value, or nil and the message.

local function one(name, words, hint)
  if #words ~= 1 then
    local quoted = {}
    for k, w in ipairs(words) do quoted[k] = quote(w) end
    return nil, string.format("RSA_%s takes one value, got %d words (%s); %s", name, #words,
      table.concat(quoted, " "), hint or "remove the extra words")
  end
  return words[1]
end

local function has_control(text) -- text is valid UTF-8 here
  for k = 1, #text do
    local b = text:byte(k)
    if b < 0x20 or b == 0x7F or (b == 0xC2 and text:byte(k + 1) <= 0x9F) then return true end
  end
  return false
end

local function normalise_path(label, raw)
  local bad = undecodable(raw)
  if bad then
    return nil, string.format("%s must be valid UTF-8, found byte %s in %s", label, bad, quote(raw))
  end
  if has_control(raw) then
    return nil, string.format("%s must not contain control characters, got %s", label, quote(raw))
  end
  if raw:sub(1, 1) ~= "/" then
    return nil, string.format("%s must be an absolute path, got %s", label, quote(raw))
  end
  local parts = {}
  for p in raw:gmatch("[^/]+") do parts[#parts + 1] = p end
  for _, p in ipairs(parts) do
    if p == "." or p == ".." then
      return nil, string.format("%s must not contain '.' or '..' components, got %s; "
        .. "write the direct path", label, quote(raw))
    end
  end
  if #parts == 0 then
    return nil, label .. " must not be the root directory '/'; name a directory below it"
  end
  for _, p in ipairs(parts) do
    if #p > NAME_MAX then
      return nil, string.format("%s has a path component longer than %d bytes", label, NAME_MAX)
    end
  end
  local path = "/" .. table.concat(parts, "/")
  if #path >= PATH_MAX then
    return nil, string.format("%s is longer than %d bytes", label, PATH_MAX - 1)
  end
  return path
end

local function parse_path(name, words)
  local value, err = one(name, words, "put a path that contains spaces in double quotes")
  if not value then return nil, err end
  return normalise_path("RSA_" .. name, value)
end

local function parse_argv(name, words)
  local prog = words[1]
  if prog:sub(1, 1) ~= "/" and undecodable(prog) == nil then
    return nil, string.format("RSA_%s must start with the absolute path of a program, got %s",
      name, quote(prog))
  end
  local path, err = normalise_path("RSA_" .. name, prog)
  if not path then return nil, err end
  local argv = { path }
  for i = 2, #words do
    local arg = words[i]
    local bad = undecodable(arg)
    if bad then
      return nil, string.format("RSA_%s argument %d must be valid UTF-8, found byte %s",
        name, i - 1, bad)
    end
    if arg:find("\0", 1, true) then
      return nil, string.format("RSA_%s argument %d must not contain a NUL character", name, i - 1)
    end
    argv[i] = arg
  end
  return argv
end

local function choice(name, words, choices)
  local value, err = one(name, words)
  if not value then return nil, err end
  local lowered = shape(value, false)
  for _, c in ipairs(choices) do
    if lowered == c then return c end
  end
  local hint = close_match(lowered, choices)
  return nil, string.format("RSA_%s must be one of %s, got %s%s", name,
    table.concat(choices, ", "), quote(value), hint and ("; did you mean " .. hint .. "?") or "")
end

local function enum(choices)
  return function(name, words) return choice(name, words, choices) end
end

local function digits(s, from, max) -- end of a run of 1..max ASCII digits at from, or nil
  local _, e = s:find("^[0-9]+", from)
  if not e or e - from + 1 > max then return nil end
  return e
end

local function parse_nodes(name, words)
  local value, err = one(name, words)
  if not value then return nil, err end
  local e = digits(value, 1, 10)
  if e == #value then
    local n = tonumber(value)
    if n >= 1 and n <= MAX_NODES then return string.format("%.0f", n) end
  end
  return nil, string.format("RSA_%s must be a whole number of RSA nodes, at least 1, got %s",
    name, quote(value))
end

local SIZE_UNITS = { k = 1, m = 2, g = 3, t = 4, p = 5 }

local function parse_capacity(name, words)
  local value, err = one(name, words)
  if not value then return nil, err end
  -- directives._SIZE_RE: [0-9]{1,20}(?:\.[0-9]{1,20})?([KMGTPkmgtp](?:i?[Bb])?)?
  local number, unit
  local e = digits(value, 1, 20)
  if e then
    if value:sub(e + 1, e + 1) == "." then e = digits(value, e + 2, 20) end
  end
  if e then
    number, unit = value:sub(1, e), value:sub(e + 1)
    if not (unit == "" or unit:find("^[KMGTPkmgtp]$") or unit:find("^[KMGTPkmgtp]i?[Bb]$")) then
      number = nil
    end
  end
  if number and unit == "" then
    return nil, string.format("RSA_%s needs a unit K, M, G, T or P, e.g. 512G; got %s", name,
      quote(value))
  end
  if not number then
    return nil, string.format("RSA_%s must be a size such as 512G or 3.5T, got %s", name,
      quote(value))
  end
  local size = math.floor(tonumber(number) * 2 ^ (10 * SIZE_UNITS[shape(unit:sub(1, 1), false)]))
  if size < 1 then
    return nil, string.format("RSA_%s must be greater than 0, got %s", name, quote(value))
  end
  if size > MAX_CAPACITY then
    return nil, string.format("RSA_%s is too large, got %s", name, quote(value))
  end
  return string.format("%.0f", size)
end

local DURATION_SUFFIX = { ms = 0.001, s = 1, m = 60, h = 3600, d = 86400 }

-- directives._DURATION_RE + units.parse_duration: seconds, or nil if not a duration.
-- (Python's re also lets U+017F match "s" under IGNORECASE, and then parse_duration
-- raises KeyError; here that is simply not a duration.)
local function duration(value)
  local e = digits(value, 1, 12)
  if not e then return nil end
  -- 30s, 1.5h, 250ms
  local f = e
  if value:sub(f + 1, f + 1) == "." then f = digits(value, f + 2, 12) end
  if f then
    local factor = DURATION_SUFFIX[shape(value:sub(f + 1), false)]
    if factor then return tonumber(value:sub(1, f)) * factor end
  end
  -- Slurm forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
  local nums, days = { tonumber(value:sub(1, e)) }, nil
  local pos = e + 1
  if value:sub(pos, pos) == "-" then
    local e2 = digits(value, pos + 1, 12)
    if not e2 then return nil end
    days, nums[1] = nums[1], tonumber(value:sub(pos + 1, e2))
    pos = e2 + 1
  end
  while pos <= #value and #nums < 3 and value:sub(pos, pos) == ":" do
    local e2 = digits(value, pos + 1, 12)
    if not e2 then return nil end
    nums[#nums + 1] = tonumber(value:sub(pos + 1, e2))
    pos = e2 + 1
  end
  if pos <= #value then return nil end
  local a, b, c = nums[1], nums[2], nums[3]
  if days then return days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0) end
  if not b then return a * 60 end
  if not c then return a * 60 + b end
  return a * 3600 + b * 60 + c
end

local function parse_reset(name, words)
  local value, err = one(name, words)
  if not value then return nil, err end
  if shape(value, false) == "input-done" then return "input-done" end
  local seconds = duration(value)
  if not seconds then
    return nil, string.format("RSA_%s must be input-done or a duration such as 30s, 10m, 2h or "
      .. "HH:MM:SS, got %s", name, quote(value))
  end
  if seconds < 1 or seconds > MAX_RESET then
    return nil, string.format("RSA_%s must be between 1s and 365 days, got %s", name, quote(value))
  end
  if seconds ~= math.floor(seconds) then
    return nil, string.format("RSA_%s must be whole seconds, got %s", name, quote(value))
  end
  return string.format("%.0fs", seconds)
end

-- name -> { parse, example shown for an empty value, admin_comment key }; ORDER is the
-- declaration order (messages list names in it, admin_comment fields follow it). A value
-- kind without a parser here is a bug of this file: refuse to load.
local PARSERS = { path = parse_path, argv = parse_argv, nodes = parse_nodes,
  capacity = parse_capacity, reset = parse_reset }
local DIRECTIVES, ORDER = {}, {}
for k, d in ipairs(GRAMMAR) do
  local name, kind, example, key, choices = unpack(d)
  DIRECTIVES[name] = { choices and enum(choices) or PARSERS[kind], example, key }
  assert(DIRECTIVES[name][1], "job_submit.lua: no parser for value kind " .. kind)
  ORDER[k] = name
end
local KNOWN = {}
for k, n in ipairs(ORDER) do KNOWN[k] = "RSA_" .. n end
local KNOWN_LIST = table.concat(KNOWN, ", ")

-- ---------------------------------------------------------------------------------------
-- The scan (directives._scan / _directive): the leading comment block, one error per line.

-- directives._value: the value of #RSA_<name>=<rest> (or of --rsa-<name>=<rest>), or nil
-- and the message.
local function parse_value(name, rest)
  local spec = DIRECTIVES[name]
  local words, serr = shlex_split(rest)
  if not words then
    if serr:find("escaped", 1, true) then
      return nil, string.format("RSA_%s ends with a lone backslash; remove it or quote the "
        .. "value", name)
    end
    return nil, string.format("RSA_%s has an unmatched quote in %s; close it or escape it "
      .. "with a backslash", name, quote(strip_c(rest)))
  end
  if #words == 0 or (#words == 1 and words[1] == "") then
    return nil, string.format("RSA_%s has an empty value; write e.g. #RSA_%s=%s", name, name,
      spec[2])
  end
  return spec[1](name, words)
end

local function directive(scan, lineno, rest)
  local function fail(message) scan.errors[#scan.errors + 1] = { lineno, message } end
  rest = decode(rest) -- before anything splits it, as Python decodes the whole script
  local n = 1
  while n <= #rest and not C_SPACE[rest:byte(n)] and rest:byte(n) ~= 61 do n = n + 1 end -- '='
  local name = rest:sub(1, n - 1)
  rest = lstrip_c(rest:sub(n))
  local known = name:match("^[A-Z0-9_]*")
  if DIRECTIVES[known] and name ~= known then -- "#RSA_DATA_IN/x": say what is missing
    local clen = char_len(name, #known + 1)
    fail(string.format("RSA_%s must be followed by '=' or a space, got %s", known,
      quote(name:sub(#known + 1, #known + clen))))
    return
  end
  if rest:sub(1, 1) == "=" then rest = rest:sub(2) end
  if name == "" then
    fail(MSG_NO_NAME)
    return
  end
  local spec = DIRECTIVES[name]
  if not spec then
    -- compare bare names: the shared "RSA_" would make everything look close
    local hint = close_match(shape(name, true), ORDER)
    local shown = quote("RSA_" .. name)
    fail("unknown directive " .. shown:sub(2, -2)
      .. (hint and ("; did you mean RSA_" .. hint .. "?") or ("; known: " .. KNOWN_LIST)))
    return
  end
  if scan.first_line[name] then
    fail(string.format("RSA_%s given more than once (first on line %d); keep one", name,
      scan.first_line[name]))
    return
  end
  scan.first_line[name] = lineno
  local value, err = parse_value(name, rest)
  if value == nil then
    fail(err)
  else
    scan.values[name] = value
    scan.raw[name] = rest
  end
end

local function count_lines(text, upto) -- 1-based line number of byte position upto
  local line, pos = 1, 1
  while true do
    local nl = text:find("\n", pos, true)
    if not nl or nl >= upto then return line end
    line, pos = line + 1, nl + 1
  end
end

local function is_blank_or_comment(line)
  local k = 1
  while k <= #line and C_SPACE[line:byte(k)] do k = k + 1 end
  return k > #line or line:byte(k) == 35 -- '#'
end

local PCT_SAFE = {}
for k = 1, 255 do
  local c = string.char(k)
  if c:find("^[A-Za-z0-9%-%._~/]$") then PCT_SAFE[k] = c end
end

local function pct_encode(text)
  return (text:gsub(".", function(c)
    return PCT_SAFE[c:byte()] or string.format("%%%02X", c:byte())
  end))
end

-- DirectiveSpec.to_admin_comment(): "rsa1:" and key=value fields in fixed order, values
-- UTF-8 percent-encoded except A-Za-z0-9-._~/, an argv as its encoded words joined by ",".
local function admin_comment(values)
  local out = {}
  for _, name in ipairs(ORDER) do
    local value = values[name]
    if value ~= nil then
      local encoded
      if type(value) == "table" then
        local words = {}
        for k, w in ipairs(value) do words[k] = pct_encode(w) end
        encoded = table.concat(words, ",")
      else
        encoded = pct_encode(value)
      end
      out[#out + 1] = DIRECTIVES[name][3] .. "=" .. encoded
    end
  end
  return ADMIN_COMMENT_PREFIX .. table.concat(out, ";")
end

local function option_of(name) -- directives.option_of: DATA_IN -> --rsa-data-in
  return "--rsa-" .. name:lower():gsub("_", "-")
end

local function same_value(x, y) -- canonical values: strings, or argv tables
  if type(x) ~= "table" or type(y) ~= "table" then return x == y end
  if #x ~= #y then return false end
  for k = 1, #x do
    if x[k] ~= y[k] then return false end
  end
  return true
end

local function exclusive(where)
  return "RSA_STAGE_OUT and RSA_POSTPROCESS both choose how output is staged out (" .. where
    .. "); keep one"
end

-- Check a submission (directives.check_submission): the script's #RSA_ lines merged with
-- the --rsa-* options (name -> value text, or nil). Returns (nil, {"LINE: message" or
-- "--rsa-x: message", ...}) when there are errors, otherwise (admin_comment or nil when
-- neither asks for the RSA).
local function check(text, options)
  local decoded, sizes = {}, {} -- option values decoded like the script's lines (directive())
  for name, value in pairs(options or {}) do
    if #value <= MAX_LINE then decoded[name] = decode(value) else decoded[name] = value end
    sizes[name] = #value
  end
  options = decoded
  local scan = { values = {}, first_line = {}, errors = {}, raw = {} }
  if text:sub(1, 3) == "\239\187\191" then -- sbatch refuses it: the first line is not "#!"
    scan.errors[1] = { 1, MSG_BOM }
    text = text:sub(4)
  end
  local at = text:find("\r\n", 1, true)
  if at then scan.errors[#scan.errors + 1] = { count_lines(text, at), MSG_CRLF } end
  at = text:find("\0", 1, true)
  if at then scan.errors[#scan.errors + 1] = { count_lines(text, at), MSG_NUL } end

  local pos, lineno = 1, 0
  while pos <= #text + 1 do
    local nl = text:find("\n", pos, true)
    local line = text:sub(pos, (nl or #text + 1) - 1)
    lineno = lineno + 1
    if line:sub(1, #PREFIX) == PREFIX then
      if pos - 1 >= MAX_SCRIPT then
        scan.errors[#scan.errors + 1] = { lineno, MSG_TOO_FAR }
        break
      end
      if #scan.errors >= MAX_ERRORS then
        scan.errors[#scan.errors + 1] = { lineno, MSG_TOO_MANY }
        break
      end
      if #line > MAX_LINE then
        scan.errors[#scan.errors + 1] = { lineno, string.format("directive line is %d bytes "
          .. "long, more than the %d allowed; shorten it", #line, MAX_LINE) }
      else
        directive(scan, lineno, line:sub(#PREFIX + 1))
      end
    elseif not is_blank_or_comment(line) then
      break
    end
    if not nl then break end
    pos = nl + 1
  end
  -- the options: each checked like its directive, then compared with the script's
  local given, option_errors = {}, {}
  for _, name in ipairs(ORDER) do
    if options[name] ~= nil then
      local value, err
      if sizes[name] > MAX_LINE then -- never split: directives._value
        err = string.format("RSA_%s is %d bytes long, more than the %d allowed; shorten it",
          name, sizes[name], MAX_LINE)
      else
        value, err = parse_value(name, options[name])
      end
      if value == nil then
        option_errors[#option_errors + 1] = option_of(name) .. ": " .. err
      else
        given[name] = value
      end
    end
  end
  local v, first = scan.values, scan.first_line
  for _, name in ipairs(ORDER) do
    if given[name] ~= nil and v[name] ~= nil and not same_value(v[name], given[name]) then
      scan.errors[#scan.errors + 1] = { first[name], string.format(
        "#RSA_%s=%s conflicts with %s=%s; keep one", name, quote(strip_c(scan.raw[name])),
        option_of(name), quote(options[name])) }
    end
  end
  local so = v.STAGE_OUT and first.STAGE_OUT or (given.STAGE_OUT and option_of("STAGE_OUT"))
  local post = v.POSTPROCESS and first.POSTPROCESS
    or (given.POSTPROCESS and option_of("POSTPROCESS"))
  if so and post then
    if type(so) == "number" and type(post) == "number" then
      local a, b = so, post
      if a > b then a, b = b, a end
      scan.errors[#scan.errors + 1] = { b, exclusive(string.format("lines %d and %d", a, b)) }
    elseif type(so) == "number" or type(post) == "number" then
      local line, opt = so, post
      if type(so) ~= "number" then line, opt = post, so end
      scan.errors[#scan.errors + 1] = { line, exclusive(string.format("line %d and %s", line,
        opt)) }
    else
      option_errors[#option_errors + 1] = option_of("POSTPROCESS") .. ": "
        .. exclusive(so .. " and " .. post)
    end
  end
  if #scan.errors > 0 or #option_errors > 0 then
    for k, e in ipairs(scan.errors) do e[3] = k end
    table.sort(scan.errors, function(x, y) -- by line, stable
      if x[1] ~= y[1] then return x[1] < y[1] end
      return x[3] < y[3]
    end)
    local lines = option_errors
    for _, e in ipairs(scan.errors) do lines[#lines + 1] = e[1] .. ": " .. e[2] end
    return nil, lines
  end
  for name, value in pairs(given) do v[name] = value end
  if next(v) == nil then return nil end
  return admin_comment(v)
end

-- The --rsa-* options of a submission: the SPANK plugin (slurm_plugins/spank) passes each
-- as "RSA_<NAME>=<value>" in job_desc.spank_job_env, a table indexed from 0. Entries for
-- unknown names are not ours; of two entries for one name the first counts. nil if none.
local function spank_options(job_desc)
  local env = job_desc.spank_job_env
  if type(env) ~= "table" then return nil end
  local keys = {}
  for k in pairs(env) do
    if type(k) == "number" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  local options
  for _, k in ipairs(keys) do
    local entry = env[k]
    local name, value
    if type(entry) == "string" then name, value = entry:match("^RSA_([A-Z_]+)=(.*)$") end
    if name and DIRECTIVES[name] and (options == nil or options[name] == nil) then
      options = options or {}
      options[name] = value
    end
  end
  return options
end

-- ---------------------------------------------------------------------------------------
-- Early start `wait`: the start hold (rsa_scheduler/daemon/holds.py says what rsad does)

-- The admin_comment to store for a job with RSA work whose early-start policy is wait:
-- the job is held (begin time = now + wait_timeout) and the comment says until when. A
-- job with a begin time of its own in the future keeps it and is not held (rsad stages
-- it when it is on-deck). Fields are ";"-separated and values never contain ";" or "="
-- (percent-encoded), so the patterns cannot match inside a value.
local function hold_comment(job_desc, comment)
  local work = false
  for _, key in ipairs({ "i", "o", "pre", "post" }) do
    if comment:find("[:;]" .. key .. "=") then work = true end
  end
  if not work then
    return comment
  end
  local es = comment:match("[:;]es=([%a]+)") or CONFIG.early_start
  if es ~= "wait" then
    return comment
  end
  local now = CONFIG.now()
  local begin = job_desc.begin_time
  if begin ~= nil and begin ~= slurm.NO_VAL and begin > now then
    return comment -- the user's own --begin
  end
  local deadline = now + CONFIG.wait_timeout
  job_desc.begin_time = deadline
  return comment .. " hold=" .. string.format("%d", deadline)
end

-- ---------------------------------------------------------------------------------------
-- Native mode: the burst buffer directive (docs/design/native-mode.md)

-- Whether the leading comment block of `script` has a "#<directive>" line: Slurm's
-- burst_buffer/lua reads only that block, up to the first line not starting with "#".
local function has_bb_line(script, directive)
  for line in script:gmatch("[^\n]+") do
    if line:sub(1, 1) ~= "#" then
      return false
    end
    if line:sub(2, 1 + #directive) == directive then
      return true
    end
  end
  return false
end

-- "pool=<tier> capacity=<N>M" for the job's "#BB_LUA" line, from its admin_comment: the
-- tier it asked for (else CONFIG.bb_pool) and its #RSA_CAPACITY rounded up to MiB (else
-- 1 MiB, Slurm's smallest accounted size). Slurm asks real_size only for a sized request,
-- and only ever grows the size: rsad's answer (the RSA nodes it gave) is what sacct shows.
local function bb_request(comment)
  local tier = comment:match("[:;]t=(%w+)")
  if tier == nil or tier == "auto" then
    tier = CONFIG.bb_pool
  end
  local mib = 1
  local bytes = tonumber(comment:match("[:;]c=(%d+)") or "")
  if bytes ~= nil and bytes > 0 then
    mib = math.ceil(bytes / 1048576)
  end
  return string.format("pool=%s capacity=%.0fM", tier, mib)
end

-- An RSA job with work (input, output, pre- or postprocess) gets "#<directive>" so
-- Slurm runs burst_buffer.lua's hooks for it; one it already has (or a --bb) is kept.
local function bb_line(job_desc, script, comment)
  local work = false
  for _, key in ipairs({ "i", "o", "pre", "post" }) do
    if comment:find("[:;]" .. key .. "=") then work = true end
  end
  if not work or has_bb_line(script, CONFIG.bb_directive) then
    return
  end
  local bb = job_desc.burst_buffer
  if bb ~= nil and bb ~= "" then
    return
  end
  job_desc.burst_buffer = "#" .. CONFIG.bb_directive .. " " .. bb_request(comment)
end

-- ---------------------------------------------------------------------------------------
-- Slurm entry points

-- Submission: validate the #RSA_ directives of a batch script, annotate admin_comment.
-- What sbatch shows on rejection (Slurm 22.05): every slurm.log_user line on stderr, as
--   sbatch: error: 4: RSA_NODES must be a whole number of RSA nodes, at least 1, got 'two'
--   sbatch: error: Batch job submission failed: Unspecified error
function slurm_job_submit(job_desc, part_list, submit_uid) -- luacheck: ignore (Slurm API)
  local script = job_desc.script
  -- --rsa-* options (the SPANK plugin) are merged with the script's #RSA_ lines; a job
  -- with neither (any salloc/srun allocation without options) is not an RSA job
  local got, options = pcall(spank_options, job_desc)
  if not got then
    slurm.log_error("rsa: reading spank_job_env failed, options ignored: %s", tostring(options))
    options = nil
  end
  if (script == nil or script == "") and options == nil then
    return slurm.SUCCESS
  end
  local ok, comment, errors = pcall(check, script or "", options)
  if not ok then -- a bug here must not stop the job: it runs without the RSA
    slurm.log_error("rsa: directive check failed, job accepted without RSA: %s",
      tostring(comment))
    return slurm.SUCCESS
  end
  if errors then
    for _, line in ipairs(errors) do
      slurm.log_user("%s", line) -- "%s": user text must never be a format string
    end
    slurm.log_info("rsa: job from uid %d rejected: %d directive error(s), first: %s",
      submit_uid, #errors, errors[1])
    return slurm.ERROR
  end
  if comment then
    if CONFIG.bb_directive ~= nil then
      job_desc.admin_comment = comment
      bb_line(job_desc, script or "", comment)
    else
      job_desc.admin_comment = hold_comment(job_desc, comment)
    end
  end
  return slurm.SUCCESS
end

local function privileged(uid)
  return uid == 0 or (CONFIG.slurm_user_uid ~= nil and uid == CONFIG.slurm_user_uid)
end

local function is_set(value) -- job_desc numbers are NO_VAL when the request leaves them alone
  return value ~= nil and value ~= slurm.NO_VAL
end

-- Modification: a user cannot undo a lock-in. Slurm 22.05 discards slurm.log_user in
-- job_modify, so the user sees the error code's text ("Access/permission denied");
-- the reason goes to slurmctld's log.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) -- luacheck: ignore
  if privileged(modify_uid) then
    return slurm.SUCCESS
  end
  local locked = job_rec.qos ~= nil and job_rec.qos == CONFIG.lockin_qos
  if not locked and CONFIG.lockin_priority ~= nil then
    locked = (job_rec.priority or 0) >= CONFIG.lockin_priority
  end
  if not locked then
    return slurm.SUCCESS
  end
  local refused = {}
  if job_desc.qos ~= nil then refused[#refused + 1] = "qos" end
  if is_set(job_desc.priority) then refused[#refused + 1] = "priority" end
  if is_set(job_desc.nice) then refused[#refused + 1] = "nice" end
  if #refused == 0 then
    return slurm.SUCCESS
  end
  slurm.log_info("rsa: refused uid %d changing %s of job %s: it is locked in by the RSA "
    .. "(its input is staged); scancel it, or ask an administrator to release it",
    modify_uid, table.concat(refused, ", "), string.format("%d", job_rec.job_id or 0))
  return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
end

-- For tests (tests/lua/run_vector.lua) and curious admins; Slurm ignores it.
rsa_job_submit = { check = check, config = CONFIG, hold_comment = hold_comment, -- luacheck: ignore
  bb_line = bb_line, has_bb_line = has_bb_line,
  quote = function(text) return quote(decode(text)) end, spank_options = spank_options }

return slurm.SUCCESS -- load status for slurm_lua_loadscript
