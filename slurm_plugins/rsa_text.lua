--[[ rsa_text.lua — Python's string semantics in Lua 5.1, for job_submit.lua.

What it owns: what rsa_scheduler/core/directives.py gets from Python's str and standard
library, byte for byte, so that job_submit.lua answers exactly as `rsa directives check`:
UTF-8 decoding with surrogate escapes (decode, char_len), repr()-style quoting of user
text (quote), the case shapes and whitespace stripping of str (shape, lstrip_c, strip_c),
difflib.get_close_matches (close_match) and shlex.split (shlex_split).

Loaded by job_submit.lua (never by Slurm itself) with `take` and the grammar table
(rsa_grammar.lua); returns its functions in a table. Pure string work: no I/O, no
globals, Lua 5.1 syntax and library (runs on 5.2-5.4 too). Strings are bytes.
]]

local take, G = ...
local QUOTE_MAX = take(G, "rsa_grammar.lua", "QUOTE_MAX")
local unpack = unpack or table.unpack -- luacheck: ignore (5.1 global vs 5.2+ table field)

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

return { C_SPACE = C_SPACE, decode = decode, char_len = char_len, quote = quote,
  undecodable = undecodable, shape = shape, lstrip_c = lstrip_c, strip_c = strip_c,
  close_match = close_match, shlex_split = shlex_split }
