-- POST /register with an email unique per request: run tag + thread id + counter.
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local path = os.getenv("BENCH_PATH")
local tag = os.getenv("BENCH_TAG")
local password = os.getenv("BENCH_PASSWORD")
local headers = { ["Content-Type"] = "application/json" }

function request()
  counter = counter + 1
  local body = string.format('{"email":"r%s-%d-%d@bench.example.com","password":"%s"}',
    tag, tid, counter, password)
  return wrk.format("POST", path, headers, body)
end
