-- wrk script for bench/run.sh: every request carries a random X-User-Id,
-- as in the issue. The path comes from BENCH_PATH (default /api/x).
local path = os.getenv("BENCH_PATH") or "/api/x"
math.randomseed(os.time())
local random, format = math.random, wrk.format
request = function()
  return format("GET", path, { ["X-User-Id"] = tostring(random(1, 1000000000)) })
end
