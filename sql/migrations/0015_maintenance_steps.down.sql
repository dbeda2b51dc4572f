-- Reverses 0015_maintenance_steps. set_maintenance_step returns a row of the table, so
-- it goes first; Migrate re-applies the function set.
drop function if exists pgrun.set_maintenance_step(text, interval);
drop table pgrun.maintenance_steps;
delete from pgrun.function_ledger;
