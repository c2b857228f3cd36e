-- A whole session per loop: login, 20x GET /me, refresh, logout. One connection per thread
-- (run with -t N -c N), so each thread's requests and responses alternate strictly.
-- BENCH_APP=authgate: JSON login, /auth/me, /auth/refresh, /auth/logout with the refresh token.
-- BENCH_APP=peer: form login, /users/me, no refresh (fastapi-users has none), bearer logout.
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
local app = os.getenv("BENCH_APP")
local email = os.getenv("BENCH_EMAIL")
local password = os.getenv("BENCH_PASSWORD")
local step = 0
local access, refresh = nil, nil
sessions, failures = 0, 0

local function login()
  if app == "peer" then
    return wrk.format("POST", "/auth/jwt/login",
      { ["Content-Type"] = "application/x-www-form-urlencoded" },
      "username=" .. email .. "&password=" .. password)
  end
  return wrk.format("POST", "/auth/login", { ["Content-Type"] = "application/json" },
    '{"email":"' .. email .. '","password":"' .. password .. '"}')
end

function request()
  if step == 0 or access == nil then
    step = 0
    return login()
  elseif step <= 20 then
    local path = app == "peer" and "/users/me" or "/auth/me"
    return wrk.format("GET", path, { ["Authorization"] = "Bearer " .. access })
  elseif step == 21 and app ~= "peer" then
    return wrk.format("POST", "/auth/refresh", { ["Content-Type"] = "application/json" },
      '{"refresh_token":"' .. refresh .. '"}')
  elseif app == "peer" then
    return wrk.format("POST", "/auth/jwt/logout", { ["Authorization"] = "Bearer " .. access })
  else
    return wrk.format("POST", "/auth/logout", { ["Content-Type"] = "application/json" },
      '{"refresh_token":"' .. refresh .. '"}')
  end
end

function response(status, headers, body)
  if status >= 300 then
    failures = failures + 1
    step, access = 0, nil
    return
  end
  if step == 0 or (step == 21 and app ~= "peer") then
    access = string.match(body, '"access_token":"([^"]+)"')
    refresh = string.match(body, '"refresh_token":"([^"]+)"')
  end
  local last = app == "peer" and 21 or 22
  if step == last then
    sessions = sessions + 1
    step, access = 0, nil
  else
    step = step + 1
  end
end

function done(summary, latency, requests)
  local s, f = 0, 0
  for _, t in ipairs(threads) do
    s = s + t:get("sessions")
    f = f + t:get("failures")
  end
  bench_done(summary, latency, string.format(',"sessions":%d,"failures":%d', s, f))
end
