-- Shared by every scenario: thread bookkeeping and a machine-readable summary line.
threads = {}
counter = 0

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

function bench_done(summary, latency, extra)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,'
      .. '"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d%s}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout, extra or ""))
end

function done(summary, latency, requests)
  bench_done(summary, latency)
end
