-- Reverses 0006_privileges.
drop table if exists pgrun.settings;
delete from pgrun.function_ledger;
