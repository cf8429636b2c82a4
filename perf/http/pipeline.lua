-- wrk script: pipelined requests, `depth` per write (default 16), as TechEmpower's plaintext
-- test does.   wrk -s perf/http/pipeline.lua http://127.0.0.1:8080/plaintext -- 16
init = function(args)
  local depth = tonumber(args[1]) or 16
  local r = {}
  for i = 1, depth do
    r[i] = wrk.format(nil)
  end
  req = table.concat(r)
end

request = function()
  return req
end
