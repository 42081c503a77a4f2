-- sc_batch: apply many commands in one call (informer ingest, bulk loads).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, then per command: name (e.g. "add_pod"), argc, argc arguments as the
--          single command takes them after `replica`
-- Keys     those of the commands
-- Reply    a flat list: per command 1 and its reply, or 0 and its error text
-- Errors   BADARG <what>   the batch itself is malformed, or longer than MAX_BATCH_COMMANDS
--                          (BADARG commands) or MAX_BATCH_BYTES (BADARG bytes); nothing was
--                          applied
-- Commands are applied in order; one that fails writes nothing, and the rest still run, as
-- if each had been sent on its own (but without a round trip each).

-- Commands one call applies at most: a call holds Redis for its whole run, and a function that
-- wrote cannot be killed (FUNCTION KILL answers UNKILLABLE), so its length is its caller's to
-- bound, before anything runs (store/batch.py's MAX_CHUNK_SIZE is the same).
local MAX_BATCH_COMMANDS = 1000
-- Bytes of the commands' arguments (names and counts included) one call takes at most
-- (store/batch.py's MAX_GROUP_BYTES): each pod's msgpack is copied into a record and an event.
local MAX_BATCH_BYTES = 4 * 1048576

local function batch(p, replica, a)
  local fns, calls = {}, {}  -- each command's function and arguments (no table a command)
  local bytes = 0
  for j = 1, #a do bytes = bytes + #a[j] end
  if bytes > MAX_BATCH_BYTES then return nil, 'BADARG bytes: more than ' .. MAX_BATCH_BYTES end
  local i = 1
  while i <= #a do
    if #calls >= MAX_BATCH_COMMANDS then
      return nil, 'BADARG commands: more than ' .. MAX_BATCH_COMMANDS
    end
    local fn, argc = COMMANDS[a[i]], tonumber(a[i + 1])
    if fn == nil or fn == batch then return nil, 'BADARG command ' .. tostring(a[i]) end
    if argc == nil or argc < 0 or i + 1 + argc > #a then
      return nil, 'BADARG argc ' .. a[i]
    end
    local args
    if argc <= ARGS_UNPACKED then  -- one constructor sizes it once (see wrap)
      args = { unpack(a, i + 2, i + 1 + argc) }
    else
      args = {}
      for j = 1, argc do args[j] = a[i + 1 + j] end
    end
    fns[#fns + 1] = fn
    calls[#fns] = args
    i = i + 2 + argc
  end
  local out, applied = {}, 0
  batching = true  -- pods join `pods` at the end of the call (_helpers.lua)
  for j = 1, #fns do
    local ok, result, err = pcall(fns[j], p, replica, calls[j])
    if not ok then
      -- Corruption met by this command before its first write: its error, and the batch
      -- goes on. Anything else is raised again.
      err = corruption_of(result)
      -- A failure after writes (a bug, or the server's): the record write it held back goes
      -- out as it would have without the hold; refused before its first write, none is held.
      READS.release_record()
      if err == nil then error(result) end
      result = nil
    end
    if result == nil then
      out[#out + 1] = 0
      out[#out + 1] = err
    else
      applied = applied + 1
      out[#out + 1] = 1
      out[#out + 1] = result
    end
  end
  -- The third value tells the wrapper whether anything was applied (and so worth remembering).
  return out, nil, applied
end
