-- POST /refresh, each pre-loaded refresh token exactly once: thread k of n takes the lines
-- k, k+n, k+2n, ... of BENCH_TOKENS. A thread that runs out stops (the harness loads more
-- tokens than the run can spend and reports it if not).
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local path = os.getenv("BENCH_PATH")
local headers = { ["Content-Type"] = "application/json" }
local tokens = {}
local nthreads = tonumber(os.getenv("BENCH_THREADS"))
local idx = 0

function init(args)
  local i = 0
  for line in io.lines(os.getenv("BENCH_TOKENS")) do
    if i % nthreads == tid - 1 then
      table.insert(tokens, line)
    end
    i = i + 1
  end
end

function request()
  idx = idx + 1
  if idx > #tokens then
    exhausted = 1
    wrk.thread:stop()
    idx = #tokens
  end
  return wrk.format("POST", path, headers, '{"refresh_token":"' .. tokens[idx] .. '"}')
end

function done(summary, latency, requests)
  local out = 0
  for _, t in ipairs(threads) do
    if t:get("exhausted") then out = out + 1 end
  end
  bench_done(summary, latency, string.format(',"exhausted_threads":%d', out))
end
