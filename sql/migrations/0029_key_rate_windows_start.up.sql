-- 0029_key_rate_windows_start: the index of per-key rate windows by their start, made
-- one that a look-up of one key's window cannot use.
--
-- The claim reads each key's window by its primary key (queue, key) with a generic
-- plan made once per session (key_limits, 38_claim_keys.sql). On a table analyzed while
-- empty, as autovacuum may do on a new queue, the two indexes cost the same to the
-- planner and it chose (queue, window_start), reading the queue's every window for
-- each key: 39 ms a claim of 600 jobs over 1,000 keys instead of 1.6. A partial index
-- serves only statements whose WHERE implies its predicate, and window_start >
-- '-infinity' (true of every window) is one that only the statements that want this
-- index state: the prune of quiet windows (claim_keyed) and queue_keys' open windows.
-- The predicate is on window_start, which the index holds already: a column named in
-- it makes every UPDATE that changes the column a non-HOT one (with count there, every
-- claim's count of each key's window wrote new index entries: 10% slower burn-downs).
drop index pgrun.key_rate_windows_start_idx;
create index key_rate_windows_start_idx on pgrun.key_rate_windows (queue, window_start)
  where window_start > '-infinity';
