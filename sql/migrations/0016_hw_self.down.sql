-- Reverses 0016_hw_self. The view host_status reads the column, so it goes first;
-- forgetting the function set makes the next Migrate re-apply it (views included).
drop view if exists pgrun.host_status;
alter table pgrun.hw_metrics drop column if exists self;
delete from pgrun.function_ledger;
