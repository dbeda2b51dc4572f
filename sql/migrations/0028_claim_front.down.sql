-- Reverses 0028_claim_front; the ledger is cleared so that Migrate re-applies the
-- function set of the version that remains.
alter table pgrun.fair_cursors
  drop column front_priority, drop column front_run_at, drop column front_id, drop column front_swept_at,
  drop column keyless_at, drop column pruned_at;
delete from pgrun.function_ledger;
