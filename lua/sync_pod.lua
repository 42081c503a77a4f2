-- sc_sync_pod: a feeder's list or watch saw a pod at resourceVersion rv: assigned and running
-- ("set"), pending ("queue"), or gone or terminated ("delete"). The function decides add,
-- confirm, update or remove from what the cache holds, and queues a pending pod for its
-- scheduler's replicas (_queue.lua), so feeders need not read the cache first, and any number
-- of them may send the same change (_versions.lua).
--
-- KEYS[1]  cache prefix "{name}:"
-- ARGV     replica, rv, op, uid, then for "set": node, blob, contribution (as sc_add_pod);
--          for "queue": scheduler (spec.schedulerName), priority, blob
-- Keys     version:pod:<uid>, queued:<uid> and the queue's keys, and those of sc_add_pod,
--          sc_update_pod or sc_remove_pod; for "delete", the pod's nomination and lapsed ones
--          (nominated, nomnode, nom:<node>, nomvictims: _nominations.lua)
-- Reply    {"applied", "add"|"update"|"remove"|"queue"|"requeue"|"dequeue"|"none", gen or ""}
--          ("requeue": a queued pod's manifest or priority changed; "dequeue": a pod the
--          cache does not hold left the queue; "none" for "queue": the pod is claimed already)
--          {"dropped", "repeated"|"stale", stored version}   nothing written
-- Errors   those of sc_add_pod / sc_update_pod / sc_remove_pod (nothing written);
--          BADARG rv|op|uid|scheduler|priority|blob
-- Event    that of the command applied (PodAdded, also confirming an assumed pod; PodUpdated;
--          PodRemoved); none for a drop, a queue change, or a delete of a pod the cache does
--          not hold. A bound or deleted pod leaves the queue with the command that adds or
--          removes it.

-- A pending pod: queued, or its queued record brought up to date (its place kept, unless its
-- priority changed while it waits in `active`, or its scheduler changed). A pod the cache
-- holds (claimed by a replica) is left as it is. Its version (`vkey`, `rv`) is recorded here,
-- as the change's last write (a change that fails before it is applied again when resent),
-- in the same MSET as its queued record where that is the last write.
local function queue_pending(p, uid, scheduler, priority, blob, rec, queued, vkey, rv)
  if rec ~= nil then
    if queued ~= nil then
      queued.blob = blob
      save_queued(queued, vkey, rv)
    else
      record_version(vkey, rv, false)
    end
    return 'none'
  end
  if queued == nil then
    if batching then  -- one SADD at the call's end (_helpers.lua: end_call)
      local added = checked[' queued']
      if added == nil then
        added = {}
        checked[' queued'] = added
      end
      if added[uid] == nil then added[#added + 1] = uid end
      added[uid] = true
    else
      redis.call('SADD', p .. 'queuedpods', uid)
    end
    local listed = scheduler .. ' listed'  -- (once a call: _queue.lua)
    if not checked[listed] then
      redis.call('HSETNX', p .. 'queues', scheduler, '0-0')
      checked[listed] = true
    end
    queue_activate(p, { key = p .. 'queued:' .. uid, uid = uid, scheduler = scheduler,
                        priority = priority, attempts = 0, due = 0, blob = blob }, vkey, rv)
    return 'queue'
  end
  queued.blob = blob
  if queued.scheduler ~= scheduler or queued.priority ~= priority then
    local was = queued.scheduler
    queue_unlink(p, queued)
    queued.scheduler, queued.priority = scheduler, priority
    if queued.state == 'leased' then  -- its holder keeps it; the new queue gets it back
      redis.call('ZADD', queue_key(p, scheduler, 'leased'), 0, uid)
      save_queued(queued)
    else
      queue_activate(p, queued)
    end
    if was ~= scheduler then
      redis.call('HSETNX', p .. 'queues', scheduler, '0-0')  -- listed, as a new pod's is
      forget_if_idle(p, was)
    end
    record_version(vkey, rv, false)
  else
    save_queued(queued, vkey, rv)
  end
  return 'requeue'
end
local function sync_pod(p, replica, a)
  local rv, op, uid = normal_rv(a[1]), a[2], a[3]
  if rv == nil then return nil, 'BADARG rv' end
  if op ~= 'set' and op ~= 'delete' and op ~= 'queue' then return nil, 'BADARG op' end
  if not name_arg(uid) then return nil, 'BADARG uid' end
  local scheduler, priority = a[4], a[5]
  if op == 'queue' then
    if not valid_scheduler(scheduler) then return nil, 'BADARG scheduler' end
    if not is_int(priority) or math.abs(tonumber(priority)) > 2147483648 then
      return nil, 'BADARG priority'
    end
  end
  -- The pod's msgpack ("set": a[5], "queue": a[6]): garbage would reach every reader.
  if op ~= 'delete' and not valid_blob(op == 'set' and a[5] or a[6]) then
    return nil, 'BADARG blob'
  end
  local vkey = p .. 'version:pod:' .. uid
  local version, raw, text = READS.pod_texts(vkey, p .. 'pod:' .. uid, p .. 'queued:' .. uid)
  local dropped = stale_version(vkey, rv, version)
  if dropped ~= nil then return dropped, nil, 0 end
  -- Read as it stays (no removal's checks): the command applied below checks what it writes,
  -- the removal's keys included, and takes this record rather than reading it again.
  local rec = load_pod(p, uid, true, raw)
  -- Its queued record and the queues it touches, checked before the first write.
  local queued = load_queued(p, uid, false, op ~= 'queue', text)
  -- ("set" and "delete" only take it out of its part of the queue: no arrival counted, only
  -- that part checked, and its pods counted now, which no command below changes, for
  -- queue_drop. A new pod's push writes only `active`.)
  if queued ~= nil then
    guard_queue(p, queued.scheduler, op ~= 'queue', op ~= 'queue' and queued.state or nil)
  end
  if op == 'queue' then
    guard_queue(p, scheduler, false, queued == nil and 'active' or nil)
    local action = queue_pending(p, uid, scheduler, priority, a[6], rec, queued, vkey, rv)
    return { 'applied', action, '' }
  end
  -- A deleted pod's nomination (a preemptor gone after evicting) holds no more room, as
  -- upstream's nominator forgets a deleted pod (_nominations.lua; read before any write).
  local nominated = op == 'delete' and NOM.any(p) and NOM.plan(p, uid, now_ms(nil)) or nil
  local action, result, err = 'none', '', nil
  if op == 'delete' then
    if rec ~= nil then
      action = 'remove'
      guard_cache(p, EVERY_CACHE_KEY)
      result, err = COMMANDS['remove_pod'](p, replica, { uid, '' }, rec)
    end
  else
    -- The command's arguments (uid, node, blob, contribution) in `a` itself, shifted in place:
    -- the call's own table, which nothing reads after this command (a table less to collect).
    a[1], a[2], a[3], a[4], a[5], a[6] = uid, a[4], a[5], a[6], nil, nil
    local args = a
    -- The record it writes goes with the version, in one MSET at the end.
    READS.hold_record()
    if rec ~= nil and rec.state == 'added' then
      action = 'update'
      guard_cache(p, EVERY_CACHE_KEY)
      result, err = COMMANDS['update_pod'](p, replica, args, rec)
    else  -- new, or confirms an assumed pod (on whichever node)
      action = 'add'
      guard_cache(p, ADD_POD_KEYS)
      result, err = COMMANDS['add_pod'](p, replica, args, rec or false)
    end
  end
  if result == nil then
    READS.release_record()  -- (a refusal writes nothing: nothing is held)
    return nil, err
  end
  if nominated then NOM.settle(p, nominated) end
  if queued ~= nil then
    queue_drop(p, queued)
    if action == 'none' then action = 'dequeue' end
  end
  if op == 'delete' or not READS.release_record(vkey, rv) then
    record_version(vkey, rv, op == 'delete')
  end
  return { 'applied', action, result }
end
