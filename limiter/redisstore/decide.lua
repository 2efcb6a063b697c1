-- decide.lua: decisions of limitproxy's Redis store, each for every limit
-- of a policy at once, one after the other in one call (the arguments and
-- the reply are described below; redisstore.go and batch.go send them).
--
-- Lua in Redis has doubles for numbers: integers are exact up to 2^53. Time
-- is therefore in microseconds (what TIME gives; about 1.8e15 now), token
-- buckets count millionths of a token, and the Go side refuses parameters
-- whose products could pass 2^53. Every quantity below is an integer.
--
-- Each limit is first decided without writing anything; only if all admit
-- are their new states written, so a rejected request consumes nothing.

-- Arguments: ARGV[1] is the TTL slack, ARGV[2] the number of decisions in
-- this call (concurrent decisions are batched into one call). Then, per
-- decision, one argument holding four little-endian int64s: its instant
-- in µs (-1 = Redis's TIME), n, the number of limits, and a flag (1:
-- decide and write nothing, the admin API's peek; 2: a charge, whose head
-- is followed by one more argument, an int64: its reservation's age in
-- µs); then one argument per limit holding six: the algorithm and five
-- parameters (a calendar window's, eleven: five more for its grid, see
-- calendar below). (Binary, because tonumber on text costs more than the
-- rest of a token bucket's step.)
-- KEYS are the decisions' limits' keys in the same order. The reply is,
-- per decision, six values per limit and the instant it was decided at.
--
-- On Redis Cluster one call decides what a batch holds for one master,
-- whose decisions' keys live in many slots (each decision's in one): the
-- keys cannot be declared (Redis refuses a call whose KEYS span slots), so
-- KEYS is empty, ARGV[1] is their count and the keys follow, then the
-- arguments above; batch.go runs this script with allow-cross-slot-keys.
-- A decision whose keys this node does not serve (its slot moved, or is
-- moving and they are not all here) is left undecided, writing nothing:
-- its instant in the reply is -1, and batch.go sends it on its own.

-- Globals read once into locals: Redis 7 guards the global table with a
-- metatable, so every global lookup in the steps below would cost more
-- than the arithmetic (measured: 2.4 µs a token-bucket step with global
-- lookups, 1.3 µs with these).
local floor, min, max, abs = math.floor, math.min, math.max, math.abs
local spack, sunpack = struct.pack, struct.unpack
local call, format, insert, sub = redis.call, string.format, table.insert, string.sub
local tonumber, tostring, unpack = tonumber, tostring, unpack

-- Extra milliseconds on every TTL: 0 in production, where expiry and "now"
-- are both Redis's clock; tests that pass their own instants set it, since
-- Redis expires keys on its clock, not theirs.
local KEYS, ARGV = KEYS, ARGV
local cross = #KEYS == 0
if cross then
  local nk = tonumber(ARGV[1])
  KEYS = {unpack(ARGV, 2, nk + 1)}
  ARGV = {unpack(ARGV, nk + 2)}
end
local slack = tonumber(ARGV[1])
local decisions = tonumber(ARGV[2])
local PARAMS = '<i8i8i8i8i8i8'
local MICRO = 1000000
-- The decision at hand: its instant and n (upvalues of the steps below).
local now, n = 0, 0
local redisNow = nil

-- The string states (token and leaky buckets) of every key of the call,
-- read with one MGET rather than one GET per decision, and kept up to date
-- as decisions write them (a key can come twice in one call). Keys of the
-- other algorithms hold hashes or sorted sets; MGET reads those as false.
local strings = {}
-- away[d]: decision d's keys are not served here (on Cluster).
local away = {}
if not cross then
  local vals = call('MGET', unpack(KEYS))
  for i = 1, #KEYS do strings[KEYS[i]] = vals[i] end
else
  -- One MGET a decision (its keys share a slot; one MGET across slots
  -- is refused), through pcall: MOVED, ASK, TRYAGAIN or CLUSTERDOWN
  -- come back as an error rather than end the script.
  local pcall, a, k = redis.pcall, 3, 1
  for d = 1, decisions do
    local _, _, count, flag = sunpack('<i8i8i8i8', ARGV[a])
    local vals = pcall('MGET', unpack(KEYS, k, k + count - 1))
    if vals.err then
      away[d] = true
    else
      for i = 0, count - 1 do strings[KEYS[k + i]] = vals[i + 1] end
    end
    a = a + 1 + count
    if flag == 2 then a = a + 1 end
    k = k + count
  end
end
local function setString(key, value, ttlms)
  call('SET', key, value, 'PX', ttlms)
  strings[key] = value
end

local function ceildiv(a, b) return floor((a + b - 1) / b) end

-- muldivceil returns ceil(a*b/c) for a >= 0, exactly also when a*b passes
-- 2^53 (a bucket in debt after a charge): then without forming a*b, exact
-- while a and b*c are below 2^53 (Check keeps p*q there) and so is the
-- result.
local function muldivceil(a, b, c)
  local ab = a * b
  if ab < 9007199254740992 then return ceildiv(ab, c) end -- exact: the common case
  local x = floor(a / c)
  local r = a - x * c
  if r < 0 then x, r = x - 1, r + c end
  return x * b + ceildiv(r * b, c)
end

-- ttl returns the milliseconds until reset: the key expires when its state
-- would be a fresh key's.
local function ttl(reset) return max(1, ceildiv(reset - now, 1000)) + slack end

-- Lua's `..` writes numbers with 14 significant digits, which would round
-- a microsecond instant (16 digits); large numbers become strings only
-- through int(). (Numbers passed to redis.call are written exactly.)
local function int(x) return format('%d', x) end

-- Each step returns: allowed (0/1), retry (µs from now, -1 = never),
-- remaining, reset (absolute µs), delay (µs), next (absolute µs at which
-- remaining grows, draft-10's t; 0 = nothing more can come), and a
-- function that writes the new state (nil if nothing to write).

-- token_bucket: earns p millionths of a token every q µs, exactly; the
-- clock advances by whole q and carries the rest (as limiter/driver/tokenbucket.go).
local function token_bucket(key, p, q, burst, cost)
  local c = n * cost
  if c > burst then return 0, -1, 0, now, 0, 0, nil end
  local full, cn = burst * MICRO, c * MICRO
  local last, tokens = now, full
  -- State: last and tokens packed as two doubles (exact integers), one
  -- string: two calls a decision, GET and SET PX. Anything else there is
  -- not this store's state and counts as none.
  local raw = strings[key]
  if raw and #raw ~= 16 then raw = false end
  local t = now
  if raw then
    last, tokens = sunpack('<dd', raw)
    if t < last then t = last end
    local e = t - last
    local k = floor(e / q)
    local avail = tokens + k * p + floor((e % q) * p / q)
    if avail >= full then
      last, tokens = t, full
    else
      last, tokens = last + k * q, tokens + k * p
    end
  end
  local avail = min(full, tokens + floor((t - last) * p / q))
  local allowed, retry = 0, 0
  if avail >= cn then
    allowed = 1
    tokens = tokens - cn
    avail = avail - cn
  else
    retry = last + muldivceil(cn - tokens, q, p) - now
  end
  local reset = last + muldivceil(max(0, full - tokens), q, p)
  local write = function()
    setString(key, spack('<dd', last, tokens), ttl(reset))
  end
  if allowed == 0 and not raw then write = nil end
  -- A bucket in debt (a charge) holds less than nothing: none remain.
  local remaining = max(0, floor(avail / MICRO))
  local nxt = 0
  if (remaining + 1) * MICRO <= full then
    nxt = last + muldivceil((remaining + 1) * MICRO - tokens, q, p)
  end
  return allowed, retry, remaining, reset, 0, nxt, write
end

-- A calendar window's grid (fixed_window with w = 0): its windows follow
-- a time zone's rules, which the caller applies (limiter/driver's
-- ScriptGrid) and sends after the limit's parameters: the number ck of
-- the window holding the caller's instant, the starts of windows ck-1,
-- ck and ck+1 (cb0, cb1, cb2) and the end of ck+1 (cb3), in µs.
local ck, cb0, cb1, cb2, cb3 = 0, 0, 0, 0, 0

-- calendar reads a calendar window's grid from its limit's argument and
-- returns the window of instant t: ck-1, ck or ck+1, whichever holds it
-- (Redis's clock and the caller's may differ a little), or the nearest
-- if none does (they differ by more than a window, a day at the least).
local function calendar(arg, t)
  ck, cb0, cb1, cb2, cb3 = sunpack('<i8i8i8i8i8', arg, 49)
  if t < cb1 then return ck - 1 end
  if t < cb2 then return ck end
  return ck + 1
end

-- calendar_index returns the window of instant t, ck-2 for any before
-- ck-1 and ck+2 for any after ck+1 (for a reservation's instant).
local function calendar_index(t)
  if t < cb0 then return ck - 2 end
  if t < cb1 then return ck - 1 end
  if t < cb2 then return ck end
  if t < cb3 then return ck + 1 end
  return ck + 2
end

-- calendar_end returns when window i ends; for a window the grid does
-- not reach (one that another caller, more than a window ahead, wrote)
-- or one already over (Redis more than a window ahead), a window's length
-- from now.
local function calendar_end(i)
  local e = cb3
  if i <= ck - 1 then e = cb1 elseif i == ck then e = cb2 end
  if i > ck + 1 or e <= now then e = now + (cb3 - cb2) end
  return e
end

-- fixed_window: windows of w µs aligned to the epoch, or with w = 0 a
-- calendar window, whose grid follows the parameters in arg.
local function fixed_window(key, limit, w, cost, _, _, arg)
  local c = n * cost
  if c > limit then return 0, -1, 0, now, 0, 0, nil end
  local idx
  if w > 0 then idx = floor(now / w) else idx = calendar(arg, now) end
  local cnt = 0
  local st = call('HMGET', key, 'w', 'c')
  if st[1] and tonumber(st[2]) > 0 and tonumber(st[1]) >= idx then
    idx, cnt = tonumber(st[1]), tonumber(st[2])
  end
  local stop
  if w > 0 then stop = (idx + 1) * w else stop = calendar_end(idx) end
  local allowed, retry = 0, 0
  if cnt + c <= limit then
    allowed = 1
    cnt = cnt + c
  else
    retry = stop - now
  end
  local reset, nxt = now, 0
  if cnt > 0 then reset, nxt = stop, stop end
  local write = nil
  if allowed == 1 then
    write = function()
      call('HSET', key, 'w', idx, 'c', cnt)
      call('PEXPIRE', key, ttl(stop))
    end
  end
  return allowed, retry, max(0, limit - cnt), reset, 0, nxt, write
end

-- sliding_log: a sorted set of admitted units, scored by their instant.
-- Members are "instant:i", i counting the units at that instant, so they
-- are unique; an instant's units are trimmed together.
local function sliding_log(key, limit, w, cost)
  local c = n * cost
  if c > limit then return 0, -1, 0, now, 0, 0, nil end
  local t = now
  local newest = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > t then t = tonumber(newest[2]) end
  -- Units at or before t-w have left (t-w, t].
  local inwin = call('ZCOUNT', key, '(' .. int(t - w), '+inf')
  -- The oldest unit in the window after this request: it leaving is when
  -- remaining grows; with the window full or in debt (a charge), the
  -- (inwin-limit+1)th oldest.
  local oldest = t
  if inwin > 0 then
    local skip = 0
    if inwin + c > limit and inwin >= limit then skip = inwin - limit end
    local first = call('ZRANGEBYSCORE', key, '(' .. int(t - w), '+inf', 'WITHSCORES', 'LIMIT', skip, 1)
    oldest = tonumber(first[2])
  end
  local allowed, retry = 0, 0
  local newestt = nil
  if newest[2] then newestt = tonumber(newest[2]) end
  if inwin + c <= limit then
    allowed = 1
    inwin = inwin + c
    if c > 0 then newestt = t end
  else
    -- Fits once the oldest inwin+c-limit units in the window have left.
    local skip = call('ZCOUNT', key, '-inf', t - w)
    local at = call('ZRANGE', key, skip + inwin + c - limit - 1, skip + inwin + c - limit - 1, 'WITHSCORES')
    retry = tonumber(at[2]) + w - now
  end
  local reset, nxt = now, 0
  if inwin > 0 then reset, nxt = newestt + w, oldest + w end
  local write = function()
    call('ZREMRANGEBYSCORE', key, '-inf', t - w)
    if allowed == 1 then
      local at = call('ZCOUNT', key, t, t)
      for i = 1, c do
        call('ZADD', key, t, int(t) .. ':' .. int(at + i))
      end
    end
    if call('EXISTS', key) == 1 then
      call('PEXPIRE', key, ttl(reset))
    end
  end
  return allowed, retry, max(0, limit - inwin), reset, 0, nxt, write
end

-- sliding_window: k slots of w/k µs; a hash holds "j" (newest slot written)
-- and one counter per slot index modulo k+1.
local function sliding_window(key, limit, w, k, cost)
  local c = n * cost
  if c > limit then return 0, -1, 0, now, 0, 0, nil end
  local L = w / k
  local ring = k + 1
  local flat = call('HGETALL', key)
  local h = {}
  for i = 1, #flat, 2 do h[flat[i]] = tonumber(flat[i + 1]) end
  local j = floor(now / L)
  local t = now
  local cur = h['j']
  local empty = true
  for i = 0, k do if (h[tostring(i)] or 0) > 0 then empty = false end end
  if empty or cur == nil then cur = j end
  if j < cur then j, t = cur, cur * L end
  local function get(s)
    if s > cur or s <= cur - ring then return 0 end
    return h[tostring(s % ring)] or 0
  end
  -- The counts after admitting c at slot j (slots cur+1..j-1 zeroed).
  local function getAfter(s)
    if s == j then
      if j > cur then return c end
      return get(j) + c
    end
    if s > j or s <= j - ring or s > cur then return 0 end
    return get(s)
  end
  local function estimate_parts(m, g)
    local sum = 0
    for i = m - k + 1, m do sum = sum + g(i) end
    return sum, g(m - k)
  end
  -- fit returns the first instant >= t at which u units fit in counts g:
  -- the estimate falls linearly within a slot and steps down as slots
  -- leave the window.
  local function fit(g, u)
    for m = j, j + k + 1 do
      local s, o = estimate_parts(m, g)
      if s + u <= limit then
        local lo = max(t, m * L)
        if o == 0 then return lo end
        local at = max((m + 1) * L - floor((limit - s - u) * L / o), lo)
        if at < (m + 1) * L then return at end
      end
    end
    return t
  end
  local sum, oldest = estimate_parts(j, get)
  local weight = (j + 1) * L - t
  local used = sum * L + oldest * weight
  local capacity = limit * L
  local allowed, retry = 0, 0
  if used + c * L <= capacity then
    allowed = 1
    used = used + c * L
  else
    retry = fit(get, c) - now
  end
  local remaining = 0
  if used < capacity then remaining = floor((capacity - used) / L) end
  local nxt = 0
  if remaining < limit then
    if allowed == 1 then nxt = fit(getAfter, remaining + 1) else nxt = fit(get, remaining + 1) end
  end
  local z = nil
  if allowed == 1 and c > 0 then z = j else
    for i = cur, cur - ring + 1, -1 do if get(i) > 0 then z = i break end end
  end
  local reset = now
  if z ~= nil and (z + 1) * L + w > now then reset = (z + 1) * L + w end
  local write = nil
  if allowed == 1 then
    write = function()
      local args = {}
      if j > cur then
        for i = cur + 1, min(j, cur + ring) do
          insert(args, tostring(i % ring)); insert(args, 0)
        end
      end
      local slot = tostring(j % ring)
      local base = get(j)
      if j > cur then base = 0 end
      insert(args, slot); insert(args, base + c)
      insert(args, 'j'); insert(args, j)
      call('HSET', key, unpack(args))
      call('PEXPIRE', key, ttl(reset))
    end
  end
  return allowed, retry, remaining, reset, 0, nxt, write
end

-- leaky_bucket, virtual: nobody waits in Redis, each admitted request is
-- told its delay. The state is one string: "Q", then little-endian int64s:
-- "tat", the next place on the schedule (the last place taken plus its
-- spacing), and the release instants of the requests still waiting,
-- ascending (FIFO). A request's place is max(now, tat); it leaves "lead"
-- (delay= intervals) before its place, so at once while tat - lead <= now;
-- those whose releases are after now are waiting, and the queue counts
-- them, whatever their costs. (A plain number is the state of earlier
-- versions: tat alone.)
local function leaky_bucket(key, interval, queue, maxwait, cost, lead)
  local spacing = n * cost * interval
  local raw = strings[key]
  local tat, first, last = 0, 10, 9 -- releases are raw[first..last]
  if raw and #raw >= 9 and sub(raw, 1, 1) == 'Q' and (#raw - 1) % 8 == 0 then
    tat, last = sunpack('<i8', raw, 2), #raw
  elseif raw then
    -- Earlier versions' state: tat alone, its waiters one spacing apart.
    tat = tonumber(raw) or 0
    local deps = {}
    local d = tat - spacing
    while d > now and #deps < queue do insert(deps, 1, d); d = d - spacing end
    raw = 'Q' .. spack('<i8', tat)
    for i = 1, #deps do raw = raw .. spack('<i8', deps[i]) end
    last = #raw
  end
  if tat - lead <= now then
    -- Leaves at once (nobody can be waiting), taking the next place.
    local open = max(tat, now) + spacing
    local k = 0 -- requests of cost 1 that would still leave at once
    if open - now <= lead then k = floor((now + lead - open) / interval) + 1 end
    return 1, 0, queue + k, open, 0, open - lead + k * interval, function()
      setString(key, 'Q' .. spack('<i8', open), ttl(open))
    end
  end
  -- Skip the releases that are past (binary search: they are ascending).
  local lo, hi = 0, (last - first + 1) / 8
  local total = hi
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if sunpack('<i8', raw, first + 8 * mid) <= now then lo = mid + 1 else hi = mid end
  end
  local waiting = total - lo
  local function dep(i) return (sunpack('<i8', raw, first + 8 * (lo + i))) end
  local leave = tat - lead
  local head = leave -- a place frees when the head leaves, or the exit reopens
  if waiting > 0 then head = dep(0) end
  local wait = leave - now
  if waiting >= queue or wait > maxwait then
    local at = leave - maxwait
    if waiting >= queue then
      local free = leave
      if queue > 0 then free = dep(waiting - queue) end
      at = max(at, free)
    end
    return 0, at - now, 0, tat, 0, min(head, at), nil
  end
  local reset = tat + spacing
  return 1, 0, queue - waiting - 1, reset, wait, head, function()
    setString(key, 'Q' .. spack('<i8', reset) .. sub(raw, first + 8 * lo, last) .. spack('<i8', leave), ttl(reset))
  end
end

-- Charges (driver.Charger in limiter/driver/charge.go; the Go side's
-- Charge… steps are the reference): n units, signed, applied unconditionally for a request
-- reserved at "reserved" (µs, at most now). n is in the limit's own units
-- (its cost is not applied). Each returns whether the debt bound capped
-- it: a charge never takes a limit's usage past twice its capacity. Each
-- writes the new state; the main loop then reports it with the step at
-- n = 0 and sets the key's TTL from that report's reset.
local reserved = 0

-- units returns |n|, at most 2*capacity+1 (enough to tell a capped charge
-- apart, and to refill any debt).
local function units(capacity) return min(abs(n), 2 * capacity + 1) end

local function charge_token_bucket(key, p, q, burst, cost)
  local full = burst * MICRO
  local u = units(burst) * MICRO
  local raw = strings[key]
  if raw and #raw ~= 16 then raw = false end
  if not raw and n < 0 then return false end -- a fresh bucket is full
  local last, tokens, t = now, full, now
  if raw then
    last, tokens = sunpack('<dd', raw)
    if t < last then t = last end
    local e = t - last
    local k = floor(e / q)
    if tokens + k * p + floor((e % q) * p / q) >= full then
      last, tokens = t, full
    else
      last, tokens = last + k * q, tokens + k * p
    end
  end
  local avail = min(full, tokens + floor((t - last) * p / q))
  local capped = false
  if n > 0 then
    -- Down to -burst at most, in whole tokens (as
    -- limiter/driver/tokenbucket.go).
    local take = min(u, max(0, floor(avail / MICRO) * MICRO + full))
    tokens = tokens - take
    capped = take < u
  elseif avail + u >= full then
    last, tokens = t, full
  else
    tokens = tokens + u
  end
  setString(key, spack('<dd', last, tokens), ttl(last + muldivceil(max(0, full - tokens), q, p)))
  return capped
end

local function charge_fixed_window(key, limit, w, cost, _, _, arg)
  local u = units(limit)
  local idx
  if w > 0 then idx = floor(now / w) else idx = calendar(arg, now) end
  local cnt = 0
  local st = call('HMGET', key, 'w', 'c')
  if st[1] and tonumber(st[2]) > 0 and tonumber(st[1]) >= idx then
    idx, cnt = tonumber(st[1]), tonumber(st[2])
  end
  if n > 0 then
    -- The current window, past the limit if need be, up to 2*limit.
    local take = min(u, max(0, 2 * limit - cnt))
    call('HSET', key, 'w', idx, 'c', cnt + take)
    return take < u
  end
  -- A refund, only while the reservation's window is the current one.
  local ridx
  if w > 0 then ridx = floor(reserved / w) else ridx = calendar_index(reserved) end
  if cnt > 0 and ridx == idx then
    call('HSET', key, 'c', cnt - min(cnt, u))
  end
  return false
end

local function charge_sliding_log(key, limit, w, cost)
  local u = units(limit)
  local t = now
  local newest = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > t then t = tonumber(newest[2]) end
  local r = min(reserved, t)
  call('ZREMRANGEBYSCORE', key, '-inf', t - w)
  if n > 0 then
    -- At the reservation instant while it is in the window, else at t;
    -- the entries in the window up to 2*limit.
    local take = min(u, max(0, 2 * limit - call('ZCARD', key)))
    local at = t
    if r > t - w then at = r end
    local base = call('ZCOUNT', key, at, at)
    local args = {}
    for i = 1, take do
      insert(args, at); insert(args, int(at) .. ':' .. int(base + i))
      if #args >= 512 then call('ZADD', key, unpack(args)); args = {} end
    end
    if #args > 0 then call('ZADD', key, unpack(args)) end
    return take < u
  end
  if r > t - w then
    -- The u oldest entries at or after the reservation instant: all of an
    -- instant's but the last instant's, whose highest-numbered go, so
    -- that an instant's members stay "instant:1".."instant:m".
    local got = call('ZRANGEBYSCORE', key, r, '+inf', 'WITHSCORES', 'LIMIT', 0, u)
    local i = 1
    while i <= #got do
      local score, cnt = got[i + 1], 0
      while i <= #got and got[i + 1] == score do cnt, i = cnt + 1, i + 2 end
      local at = tonumber(score)
      local m = call('ZCOUNT', key, at, at)
      local rm = {}
      for x = m - cnt + 1, m do
        insert(rm, int(at) .. ':' .. int(x))
        if #rm >= 512 then call('ZREM', key, unpack(rm)); rm = {} end
      end
      if #rm > 0 then call('ZREM', key, unpack(rm)) end
    end
  end
  return false
end

local function charge_sliding_window(key, limit, w, k, cost)
  local u = units(limit)
  local L = w / k
  local ring = k + 1
  local flat = call('HGETALL', key)
  local h = {}
  for i = 1, #flat, 2 do h[flat[i]] = tonumber(flat[i + 1]) end
  local j = floor(now / L)
  local cur = h['j']
  local empty = true
  for i = 0, k do if (h[tostring(i)] or 0) > 0 then empty = false end end
  if empty or cur == nil then cur = j end
  if j < cur then j = cur end
  local r = min(floor(reserved / L), j) -- the reservation's slot
  local function get(s)
    if s > cur or s <= cur - ring then return 0 end
    return h[tostring(s % ring)] or 0
  end
  if n > 0 then
    -- The reservation's slot while the window covers it, else the
    -- current one; the slots held up to 2*limit.
    local held = 0
    for s = j - k, j do held = held + get(s) end
    local take = min(u, max(0, 2 * limit - held))
    local at = j
    if r >= j - k then at = r end
    local args = {}
    if j > cur then
      for i = cur + 1, min(j, cur + ring) do
        insert(args, tostring(i % ring)); insert(args, 0)
      end
    end
    insert(args, tostring(at % ring)); insert(args, get(at) + take)
    insert(args, 'j'); insert(args, j)
    call('HSET', key, unpack(args))
    return take < u
  end
  -- A refund, from the reservation's slot while the window covers it.
  if r >= j - k then
    local c = get(r)
    if c > 0 then call('HSET', key, tostring(r % ring), c - min(c, u)) end
  end
  return false
end

-- The steps by algorithm, at the numbers of limiter/driver's Algorithm
-- constants; each algorithm's file there says what its five parameters
-- are (its script method, which Limit.ScriptParams sends). An algorithm
-- that cannot be charged (the leaky bucket) has no charge.
local steps = {token_bucket, leaky_bucket, fixed_window, sliding_log, sliding_window}
local charges = {charge_token_bucket, false, charge_fixed_window, charge_sliding_log, charge_sliding_window}
local out = {}
local a, k = 3, 1 -- the next decision's ARGV and KEYS
for d = 1, decisions do
  local at, count, flag
  at, n, count, flag = sunpack('<i8i8i8i8', ARGV[a])
  if away[d] then
    for _ = 1, 6 * count do out[#out + 1] = 0 end
    out[#out + 1] = -1
    a, k = a + 1 + count, k + count
    if flag == 2 then a = a + 1 end
  else
    now = at
    if at < 0 then
      if redisNow == nil then
        local t = call('TIME')
        redisNow = tonumber(t[1]) * 1000000 + tonumber(t[2])
      end
      now = redisNow
    end
    local dry = flag == 1
    a = a + 1
    if flag == 2 then
      -- A charge: n signed units to every limit, unconditionally. ARGV[a]
      -- holds the age of its reservation in µs (>= 0), so that it reads on
      -- the clock the script uses. The reply's second value is 1 if the
      -- debt bound capped the limit's charge.
      reserved = now - sunpack('<i8', ARGV[a])
      a = a + 1
      local signed = n
      for i = 0, count - 1 do
        local alg, p1, p2, p3, p4, p5 = sunpack(PARAMS, ARGV[a + i])
        local key = KEYS[k + i]
        local capped = false
        n = signed
        if n ~= 0 then capped = charges[alg](key, p1, p2, p3, p4, p5, ARGV[a + i]) end
        n = 0
        local _, _, remaining, reset, _, nxt = steps[alg](key, p1, p2, p3, p4, p5, ARGV[a + i])
        if signed ~= 0 and alg ~= 1 then call('PEXPIRE', key, ttl(reset)) end
        local o = #out
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 1, capped and 1 or 0, remaining, reset, 0, nxt
      end
    elseif count == 1 then
      -- One limit, the common case: no tables to gather and replay.
      local alg, p1, p2, p3, p4, p5 = sunpack(PARAMS, ARGV[a])
      local allowed, retry, remaining, reset, delay, nxt, write = steps[alg](KEYS[k], p1, p2, p3, p4, p5, ARGV[a])
      if write and not dry then write() end
      local o = #out
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = allowed, retry, remaining, reset, delay, nxt
    else
      local writes, all = {}, true
      for i = 0, count - 1 do
        local alg, p1, p2, p3, p4, p5 = sunpack(PARAMS, ARGV[a + i])
        local allowed, retry, remaining, reset, delay, nxt, write = steps[alg](KEYS[k + i], p1, p2, p3, p4, p5, ARGV[a + i])
        if allowed == 0 then all = false end
        writes[i] = write
        local o = #out
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = allowed, retry, remaining, reset, delay, nxt
      end
      for i = 0, count - 1 do
        -- A single limit writes even when it rejects (a trimmed log, an
        -- advanced bucket): that changes nothing a later request would see.
        if writes[i] and all and not dry then writes[i]() end
      end
    end
    out[#out + 1] = now
    a, k = a + count, k + count
  end
end
return out
