-- Exactly-once commands. A client that lost a reply (connection cut after the script ran)
-- retries the same call with the same command id; the first outcome is remembered under
-- cmd:<id> for COMMAND_ID_TTL_MS and answered again without applying anything. Only applied
-- commands are remembered: a rejected one wrote nothing, so running it again is harmless.
-- An sc_batch call has one id for the whole call (it is atomic as a whole).

local COMMAND_ID_TTL_MS = '120000'

-- Replies are integers, strings and arrays of them; encoded with lengths, so any bytes survive:
-- i<digits>;  s<length>:<bytes>  a<count>;<items>
-- sc_sync_pod's reply (two strings, then the generation the change answers or a string) is
-- one concatenation: one new string, where the general encoding below built eight and a
-- table (~20,000 instructions of a confirmation's ~430,000); the generation is the text touch
-- formatted already.
--
-- No number is concatenated as it is: Lua turns it into text with sprintf("%.14g"), several
-- thousand instructions each (glibc's floating-point printing); the reply of an sc_batch of
-- five confirmations held twenty of them (~24,000 instructions a confirmation, measured).
-- Small integers (lengths, a batch's 1/0 flags) come from `decimal`, which keeps their text
-- (below 1,024: bounded); others are formatted once with "%d" (sprintf's integer path).
local decimal
do
  local kept = {}
  decimal = function(n)
    local text = kept[n]
    if text == nil then
      text = string.format('%d', n)
      if n >= 0 and n < 1024 then kept[n] = text end
    end
    return text
  end
end

local function encode_reply(value)
  local kind = type(value)
  if kind == 'number' then return 'i' .. decimal(value) .. ';' end
  if kind == 'string' then return 's' .. decimal(#value) .. ':' .. value end
  local count = #value
  if count == 2 and type(value[1]) == 'number' and type(value[2]) == 'string' then
    -- A claim with candidates: {generation, node taken}, the generation touch's text.
    local a, b = value[1], value[2]
    local text = a == call_gen and call_gen_text or decimal(a)
    return 'a2;i' .. text .. ';s' .. decimal(#b) .. ':' .. b
  end
  if count == 3 and type(value[1]) == 'string' and type(value[2]) == 'string' then
    local a, b, c = value[1], value[2], value[3]
    local head = 'a3;s' .. decimal(#a) .. ':' .. a .. 's' .. decimal(#b) .. ':' .. b
    if c == call_gen then
      return head .. 'i' .. call_gen_text .. ';'
    elseif type(c) == 'string' then
      return head .. 's' .. decimal(#c) .. ':' .. c
    elseif type(c) == 'number' then  -- an earlier command's generation, in an sc_batch
      return head .. 'i' .. decimal(c) .. ';'
    end
  end
  local parts = { 'a' .. decimal(count) .. ';' }
  for j = 1, count do
    local item = value[j]
    if item == 1 then
      parts[j + 1] = 'i1;'  -- an sc_batch's "applied" flag
    elseif type(item) == 'number' then
      parts[j + 1] = 'i' .. decimal(item) .. ';'
    else
      parts[j + 1] = encode_reply(item)
    end
  end
  return table.concat(parts)
end

local function decode_reply(text, position)
  local kind = string.sub(text, position, position)
  if kind == 'i' then
    local stop = string.find(text, ';', position, true)
    return tonumber(string.sub(text, position + 1, stop - 1)), stop + 1
  end
  if kind == 's' then
    local colon = string.find(text, ':', position, true)
    local length = tonumber(string.sub(text, position + 1, colon - 1))
    return string.sub(text, colon + 1, colon + length), colon + length + 1
  end
  local stop = string.find(text, ';', position, true)
  local count = tonumber(string.sub(text, position + 1, stop - 1))
  local items, next_position = {}, stop + 1
  for j = 1, count do items[j], next_position = decode_reply(text, next_position) end
  return items, next_position
end

local function remembered_reply(p, id)
  if id == '' then return nil end
  local key = p .. 'cmd:' .. id
  local stored = get_string(key)
  if not stored then return nil end
  local ok, reply = pcall(decode_reply, stored, 1)
  if not ok or reply == nil then corrupt(key, 'is not a remembered reply') end
  return reply
end

local function remember_reply(p, id, result)
  if id ~= '' then
    local encoded
    if result == call_gen then  -- the generation a change answers: formatted once already
      encoded = 'i' .. call_gen_text .. ';'
    else
      encoded = encode_reply(result)
    end
    redis.call('SET', p .. 'cmd:' .. id, encoded, 'PX', COMMAND_ID_TTL_MS)
  end
end
