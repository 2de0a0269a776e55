-- acl: which of the commands leasehold sends the connected user may not run, judged by Redis's own
-- ACL rules (`redis.acl_check_cmd`, Redis 7.0 and later) on the shapes leasehold sends them in, with
-- keys under the prefix. Runs none of them and touches no key: safe to run any number of times.
-- ARGV: one group per command, `<n> <name> <word 1> ... <word n>`: the name to report, then the
-- command's words.
-- Returns the names of the commands the user may not run ({} when it may run them all). A server
-- older than Redis 7.0 has no `redis.acl_check_cmd`: nothing can be judged there, so {} too, and the
-- version check that follows at connect refuses the server by its version, naming the fix.
if not redis.acl_check_cmd then
  return {}
end
local refused = {}
local i = 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local words = {}
  for j = 1, n do
    words[j] = ARGV[i + 1 + j]
  end
  if not redis.acl_check_cmd(unpack(words)) then
    refused[#refused + 1] = ARGV[i + 1]
  end
  i = i + 2 + n
end
return refused
