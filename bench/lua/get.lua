-- GET BENCH_PATH with a bearer token (GET /me and its peers).
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
wrk.method = "GET"
wrk.path = os.getenv("BENCH_PATH")
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")
