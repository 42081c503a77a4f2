-- Registers every command as a Redis function named sc_<command>_<tag>.
--
-- Redis function names are global to a server, so each carries this build's tag
-- (FUNCTION_SUFFIX, set by the loader: schedcache/store/library.py): builds of two releases
-- share a server side by side. Register every function under function_name(...).
-- Each is called as FCALL sc_<command> 1 <prefix> <replica> <command id> <args...> (the id may
-- be "": reads, or callers that do not retry). The wrapper answers a repeated id with the
-- first outcome (_command_ids.lua) and turns a command's `nil, "<CODE> <detail>"` into an
-- error reply; codes are schedcache's own and never one redis-py treats specially (NOSCRIPT,
-- MOVED, ...). sc_version (read-only) answers the schema version and a digest of the code, so
-- clients can tell whether the loaded library is theirs.

local function function_name(command) return 'sc_' .. command .. FUNCTION_SUFFIX end

local NAMES = { 'assume_pod', 'finish_binding', 'forget_pod', 'add_pod', 'update_pod',
                'remove_pod', 'cleanup_assumed_pods', 'add_node', 'update_node', 'remove_node',
                'batch', 'tree_next', 'forget_lapsed', 'sync_pod', 'sync_node', 'migrate',
                'queue_pop', 'queue_retry', 'nominate_pod', 'denominate_pod', 'timed_claim',
                'gang_claim', 'sync_podgroup', 'sync_budget', 'sync_namespace' }
local FUNCTIONS = { assume_pod, finish_binding, forget_pod, add_pod, update_pod, remove_pod,
                    cleanup_assumed_pods, add_node, update_node, remove_node, batch, tree_next,
                    forget_lapsed, sync_pod, sync_node, migrate, queue_pop, queue_retry,
                    NOM.nominate, NOM.denominate, TIMED_CLAIM.run, GANG.claim, PODGROUP.sync,
                    PDB.sync, NSLABELS.sync }

-- The part of a call that runs under pcall (a function of its own: no closure per call).
-- `lead`: a leading argument kept apart from `a` (sc_timed_claim's ttl), else nil.
local function run_command(fn, writes, p, replica, id, a, lead)
  if writes then
    local earlier = remembered_reply(p, id)
    if earlier ~= nil then return earlier, nil, true end
    -- An sc_batch's commands take the keys checked here as checked (expect_sets marks them
    -- only in a batch: a claim's `pods` and `assumed`, a confirmation's `assumed`, were
    -- checked again).
    if fn == batch then batching = true end
    guard_cache(p, writes)
  end
  return fn(p, replica, a, lead)
end

-- The function Redis calls: checks the prefix, answers a repeated command id, runs the
-- command, turns `nil, err` into an error reply. begin_call/end_call bracket it (generations
-- are recorded once per call). `writes`: the cache-wide keys the command may write
-- (guard_cache), or false for a read. `leading`: the command's first argument is handed to it
-- apart, the rest in `a` (sc_timed_claim: its ttl; taking it out of `a` shifted every other).
local function wrap(fn, writes, leading)
  return function(keys, args)
    local p = keys[1]
    if p == nil or string.sub(p, 1, 1) ~= '{' then
      return redis.error_reply('BADARG prefix')
    end
    local id = args[2] or ''
    local replica = args[1] or ''
    if writes and (replica == '-' or string.find(replica, '%s')) then
      -- '-' is the pod record's "no claimer": such a replica's claims would never lapse.
      return redis.error_reply('BADARG replica')
    end
    -- The command's own arguments. One table constructor sizes the table once (filling an
    -- empty one grows it at 1, 2, 4, 8...: ~1,000 instructions an argument); unpack is
    -- bounded, so a long sc_batch is copied in a loop.
    local a, lead, first = nil, nil, 3
    if leading then lead, first = args[3], 4 end
    if #args <= ARGS_UNPACKED then
      a = { unpack(args, first) }
    else
      a = {}
      for i = first, #args do a[i - first + 1] = args[i] end
    end
    begin_call()
    local ok, result, err, applied = pcall(run_command, fn, writes, p, replica, id, a, lead)
    if not ok then
      READS.release_record()  -- (a record write held back goes out, as batch.lua's)
      local text = corruption_of(result)
      -- Corruption is found before the first write, so end_call has nothing to record; it
      -- runs anyway, so a check that came late could never leave `gen` or `nodegen` behind
      -- the events. Anything else is raised again as it came (a bug or a server error).
      end_call(p)
      if text == nil then error(result) end
      return redis.error_reply(text)
    end
    end_call(p)
    if applied == true then return result end  -- a remembered reply: nothing ran
    if result == nil then return redis.error_reply(err) end
    -- Remember only what changed something: a rejected command writes nothing, not even this.
    if writes and applied ~= 0 then remember_reply(p, id, result) end
    return result
  end
end

-- The cache-wide keys a command writes, when not all of them (_helpers.lua, guard_cache): a
-- corrupt key refuses exactly the commands that would write it. sc_batch checks them all.
-- add_pod and assume_pod leave out `gen`: their first write is its INCR, which refuses a corrupt
-- one unwritten (touch in _helpers.lua). assume_pod checks its sets itself, in one call with its
-- replica's (ASSUMED_SETS in assume_pod.lua).
local WRITES = {
  add_pod = ADD_POD_KEYS,  -- `pods` too for a new pod, all of them for a move (add_pod.lua)
  assume_pod = { 'nodegen', 'events' },
  gang_claim = { 'nodegen', 'events' },  -- its sets with its replica's (gang_claim.lua)
  finish_binding = { 'deadlines', 'events' },
  timed_claim = { 'nodegen', 'deadlines', 'events' },  -- assume_pod's and finish_binding's
  tree_next = {},
  migrate = {},  -- it checks `nodes` itself, and writes node pod sets only
  queue_pop = {},  -- the queue's keys only (guard_queue)
  queue_retry = {},
  nominate_pod = {},  -- its own keys only (_nominations.lua)
  denominate_pod = {},
  sync_podgroup = {},  -- its group's keys only
  sync_budget = {},  -- its own keys only (sync_budget.lua)
  sync_namespace = {},  -- its own keys only (sync_namespace.lua)
  sync_pod = {},  -- those of the command it applies, checked once it is chosen (sync_pod.lua)
}

-- A plain numeric loop: fakeredis offers no `pairs` while a library loads.
for j = 1, #NAMES do
  COMMANDS[NAMES[j]] = FUNCTIONS[j]
  redis.register_function(function_name(NAMES[j]),
                          wrap(FUNCTIONS[j], WRITES[NAMES[j]] or EVERY_CACHE_KEY,
                               NAMES[j] == 'timed_claim'))
end

redis.register_function {
  function_name = function_name('version'),
  callback = function() return LIBRARY_VERSION end,
  flags = { 'no-writes' },
}

-- Reads, callable with FCALL_RO (and on replicas). Not part of sc_batch.
local READ_NAMES = { 'tree_read', 'read_nodes', 'read_node_deltas', 'snapshot_delta',
                     'read_namespaces' }
local READ_FUNCTIONS = { tree_read, read_nodes, read_node_deltas, snapshot_delta, NSLABELS.read }
for j = 1, #READ_NAMES do
  redis.register_function {
    function_name = function_name(READ_NAMES[j]),
    callback = wrap(READ_FUNCTIONS[j], false),
    flags = { 'no-writes' },
  }
end

-- The library's commands this caller's ACL user may not run (LIBRARY_COMMANDS, derived from
-- the Lua sources by Python), each checked on a key under the caller's prefix, and whether it
-- may run CONFIG GET (the eviction check asks only then: a refused command fills the ACL LOG).
-- A client asks once when it opens a cache (schedcache.store.store): a function denied a
-- command after its first write would leave that write behind, so such a user's writes are
-- refused whole. Nothing denied where the server has no redis.acl_check_cmd (fakeredis: no ACL
-- users). Every check passes at least a command's arity in arguments: fewer crash Redis 7.0
-- (redis/redis#14843), so no argument of the caller's ever reaches acl_check_cmd.
redis.register_function {
  function_name = function_name('permitted'),
  callback = function(keys)
    local p = keys[1]
    if p == nil or string.sub(p, 1, 1) ~= '{' then return redis.error_reply('BADARG prefix') end
    local denied = {}
    if redis.acl_check_cmd == nil then return { denied, 1 } end
    local key = p .. 'acl'
    local args = { key, key, key, key, key, key }
    for j = 1, #LIBRARY_COMMANDS do
      local command = LIBRARY_COMMANDS[j]
      if not redis.acl_check_cmd(command[1], unpack(args, 1, command[2])) then
        denied[#denied + 1] = command[1]
      end
    end
    local config = 0
    if redis.acl_check_cmd('CONFIG', 'GET', 'maxmemory-policy') then config = 1 end
    return { denied, config }
  end,
  flags = { 'no-writes' },
}
