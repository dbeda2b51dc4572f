-- Reverses 0008_enqueue_batch. The insert trigger of the function set names columns
-- added by 0002 and 0003 in its WHEN clause, which would keep their down migrations
-- from dropping them: it is dropped here, and the ledger cleared so that Migrate
-- re-applies the function set of the version that remains.
drop trigger if exists jobs_before_insert on pgrun.jobs;
alter index pgrun.jobs_claim_idx reset (deduplicate_items);
delete from pgrun.function_ledger;
