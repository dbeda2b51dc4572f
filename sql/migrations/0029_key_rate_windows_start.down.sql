-- Reverses 0029_key_rate_windows_start; the ledger is cleared so that Migrate
-- re-applies the function set of the version that remains.
drop index pgrun.key_rate_windows_start_idx;
create index key_rate_windows_start_idx on pgrun.key_rate_windows (queue, window_start);
delete from pgrun.function_ledger;
