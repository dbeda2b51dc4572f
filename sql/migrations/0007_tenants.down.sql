-- Reverses 0007_tenants: the mode off, policies gone, keys global again.
drop trigger if exists jobs_tenant on pgrun.jobs;
alter table pgrun.jobs disable row level security;
alter table pgrun.runs disable row level security;
alter table pgrun.job_events disable row level security;
alter table pgrun.run_inputs disable row level security;
do $$
declare
  p record;
begin
  for p in select polname, polrelid::regclass as rel from pg_policy
           where polrelid in ('pgrun.jobs'::regclass, 'pgrun.runs'::regclass,
                              'pgrun.job_events'::regclass, 'pgrun.run_inputs'::regclass) loop
    execute format('drop policy %I on %s', p.polname, p.rel);
  end loop;
end;
$$;
create unique index jobs_unique_key_active_idx on pgrun.jobs (unique_key)
  where unique_key is not null and status in ('pending', 'queued', 'running', 'waiting');
drop index pgrun.jobs_unique_key_tenant_idx;
create unique index runs_unique_key_active_idx on pgrun.runs (unique_key)
  where unique_key is not null and status = 'running';
drop index pgrun.runs_unique_key_tenant_idx;
drop table pgrun.tenant_roles;
alter table pgrun.jobs drop column tenant cascade;
alter table pgrun.runs drop column tenant cascade;
delete from pgrun.function_ledger;
