-- Reverses 0020_claim_lanes: the lane indexes made for laned queues, then the column.
do $$
declare
  i text;
begin
  for i in select c.relname from pg_index x join pg_class c on c.oid = x.indexrelid
           where x.indrelid = 'pgrun.jobs'::regclass and c.relname like 'jobs\_lanes\_%' loop
    execute format('drop index pgrun.%I', i);
  end loop;
end $$;
alter table pgrun.queues drop column claim_lanes;
delete from pgrun.function_ledger;
