-- check: which key of the name holds something leasehold did not write there (read-only; for
-- `status`, `list` and an error that must name the key).
-- KEYS[1] lock
-- Returns {} when every key of the name is leasehold's or absent, else {key, what it holds}.
local key, found = foreign_key()
if key then
  return {key, found}
end
return {}
