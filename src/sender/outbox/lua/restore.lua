-- Moving an outbox from the layout before the due index: restores each
-- key KEYS[i] from the DUMP payload ARGV[i] unless it exists already (a
-- move stopped halfway and run again keeps what was moved).
for i = 1, #KEYS do
  if ARGV[i] ~= '' and redis.call('EXISTS', KEYS[i]) == 0 then
    redis.call('RESTORE', KEYS[i], 0, ARGV[i])
  end
end
return #KEYS
