--[[ rsa_directives.lua — the #RSA_* directive check of job_submit.lua.

What it owns: check(script, options), the port of directives.check_submission() (the
reference is rsa_scheduler/core/directives.py; tests/data/directives/ holds the shared
vectors): the scan of a script's leading comment block, one parser per value kind (path,
argv, nodes, capacity, choice, reset) with its messages, the --rsa-* options merged with
the script's lines, and the admin_comment encoding of DirectiveSpec.to_admin_comment().
Refuses to load when a value kind of the grammar has no parser here.

Loaded by job_submit.lua (never by Slurm itself) with `take`, the grammar table
(rsa_grammar.lua) and the text functions (rsa_text.lua); returns { check, DIRECTIVES }.
Pure string work: no I/O, no globals, Lua 5.1 syntax and library (runs on 5.2-5.4 too).
]]

local take, G, T = ...
local PREFIX, ADMIN_COMMENT_PREFIX, PATH_MAX, NAME_MAX, MAX_NODES, MAX_CAPACITY, MAX_RESET,
  MAX_LINE, MAX_ERRORS, MAX_SCRIPT, MSG_BOM, MSG_CRLF, MSG_NUL, MSG_TOO_FAR, MSG_TOO_MANY,
  MSG_NO_NAME, GRAMMAR = take(G, "rsa_grammar.lua", "PREFIX", "ADMIN_COMMENT_PREFIX",
  "PATH_MAX", "NAME_MAX", "MAX_NODES", "MAX_CAPACITY", "MAX_RESET", "MAX_LINE",
  "MAX_ERRORS", "MAX_SCRIPT", "MSG_BOM", "MSG_CRLF", "MSG_NUL", "MSG_TOO_FAR",
  "MSG_TOO_MANY", "MSG_NO_NAME", "GRAMMAR")
local C_SPACE, decode, char_len, quote, undecodable, shape, lstrip_c, strip_c, close_match,
  shlex_split = take(T, "rsa_text.lua", "C_SPACE", "decode", "char_len", "quote",
  "undecodable", "shape", "lstrip_c", "strip_c", "close_match", "shlex_split")
local unpack = unpack or table.unpack -- luacheck: ignore (5.1 global vs 5.2+ table field)

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
  assert(DIRECTIVES[name][1], "rsa_directives.lua: no parser for value kind " .. kind)
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


return { check = check, DIRECTIVES = DIRECTIVES }
