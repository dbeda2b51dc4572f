-- Reverses 0030_fair_slots; the ledger is cleared so that Migrate re-applies the
-- function set of the version that remains.
drop index pgrun.jobs_fair_key_idx;
drop index pgrun.jobs_fair_tenant_idx;
create index jobs_fair_key_idx on pgrun.jobs (queue, concurrency_key, priority, run_at, id)
  with (deduplicate_items = off) where status = 'queued' and concurrency_key is not null;
create index jobs_fair_tenant_idx on pgrun.jobs (queue, tenant, priority, run_at, id)
  with (deduplicate_items = off) where status = 'queued' and tenant is not null;
delete from pgrun.function_ledger;
