-- wrk script for bench/scale.py: replays snapshots that scale.py prepared.
--
-- wrk -t1 -c8 -d10s -s bench/scale_snapshots.lua URL -- FILE TOKEN FIRST_SEQ
--
-- FILE has one request a line: "path<TAB>offset<TAB>body", the body's seq written as @SEQ@.
-- Lines are sent in order and the list starts over when it ends. A line's seq is
-- FIRST_SEQ + pass * stride + offset (stride: the largest offset + 1), so a stream that appears
-- on several lines, or in several passes, always gets a higher seq than before. Building the
-- body is two string concatenations: the client stays cheap on the cores the service shares.

local paths, offsets, heads, tails = {}, {}, {}, {}
local count, index, pass, stride = 0, 0, 0, 1
local token, first_seq
local errors = 0

function init(args)
   local file = assert(io.open(args[1], "r"))
   token, first_seq = args[2], tonumber(args[3])
   for line in file:lines() do
      local tab = line:find("\t", 1, true)
      local tab2 = line:find("\t", tab + 1, true)
      local body = line:sub(tab2 + 1)
      local at = body:find("@SEQ@", 1, true)
      count = count + 1
      paths[count] = line:sub(1, tab - 1)
      offsets[count] = tonumber(line:sub(tab + 1, tab2 - 1))
      stride = math.max(stride, offsets[count] + 1)
      heads[count] = body:sub(1, at - 1)
      tails[count] = body:sub(at + 5)
   end
   file:close()
   wrk.headers["Authorization"] = "Bearer " .. token
   wrk.headers["Content-Type"] = "application/json"
end

function request()
   index = index + 1
   if index > count then
      index, pass = 1, pass + 1
   end
   return wrk.format("POST", paths[index], nil, heads[index] .. (first_seq + pass * stride + offsets[index]) .. tails[index])
end

function response(status, headers, body)
   if status ~= 200 and errors < 3 then
      errors = errors + 1
      io.stderr:write("answered " .. status .. ": " .. body:sub(1, 300) .. "\n")
   end
end
