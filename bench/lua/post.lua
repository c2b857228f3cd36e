-- POST the same body to BENCH_PATH (login with a correct password).
dofile(os.getenv("BENCH_LUA_DIR") .. "/common.lua")
wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH")
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = os.getenv("BENCH_CTYPE")
