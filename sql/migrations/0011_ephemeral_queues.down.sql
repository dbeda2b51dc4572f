-- Reverses 0011_ephemeral_queues.
alter table pgrun.queues drop column ephemeral;
delete from pgrun.function_ledger;
