-- lib/acl.lua: a script's permission check (script_acl.rs).

-- The slow path of the check scripts.rs puts on the last line, before `main` runs:
-- `redis.acl_check_cmd` for every command the script and the lib functions it has can
-- send, from their text (PUBLISH on the queue's channel), one `and` after the other;
-- when one is refused, this is called with them all and raises NOPERM naming the first
-- refused and its grant, before anything is written. Redis refuses a command only when a
-- script reaches it and keeps the writes before it, so without the check a missing grant
-- would leave half a change (a bucket without its job, a `due` member without its
-- bucket). The cost is in script_acl.rs.
function acl_refused(...)
  local acl, cmds = redis.acl_check_cmd, { ... }
  for i = 1, #cmds do
    local c = cmds[i]
    local why
    if c == 'PUBLISH' and not acl(c, CHANNEL, '') then
      why = 'publish on ' .. CHANNEL
      if acl(c) then
        why = why .. ' (grant channel &' .. CHANNEL .. ' or &tickless:*)'
      else
        why = why .. ' (grant +publish)'
      end
    elseif c ~= 'PUBLISH' and not acl(c) then
      why = 'run ' .. c .. ' (grant +' .. string.lower(c) .. ')'
    end
    if why then
      error({ err = 'NOPERM this user may not ' .. why
        .. '; checked before the script wrote anything: nothing was changed' })
    end
  end
end
