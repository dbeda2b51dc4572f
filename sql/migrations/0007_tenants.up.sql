-- 0007_tenants: the optional tenant mode. A job and a run carry the tenant of the
-- role that enqueued or started it; with the mode on (pgrun.set_tenant_mode), row-level
-- security limits an enqueuer to its own tenant's rows. The mode is off after this
-- migration: nothing changes until an administrator turns it on.

alter table pgrun.jobs add column tenant text;
alter table pgrun.runs add column tenant text;

-- tenant_roles maps roles to tenants. A session's tenant is the one tenant mapped to
-- its role (or a role it is a member of); a role mapped to several picks one with
-- SET pgrun.tenant, among those only. Written by administrators (grant_tenant).
create table pgrun.tenant_roles (
  role        name not null,
  tenant      text not null,
  granted_at  timestamptz not null default now(),
  primary key (role, tenant)
);

-- Unique keys are per tenant: one tenant's key neither collides with nor reveals
-- another's. NULLS NOT DISTINCT keeps jobs without a tenant (the mode off) one space.
create unique index jobs_unique_key_tenant_idx on pgrun.jobs (unique_key, tenant) nulls not distinct
  where unique_key is not null and status in ('pending', 'queued', 'running', 'waiting');
drop index pgrun.jobs_unique_key_active_idx;
create unique index runs_unique_key_tenant_idx on pgrun.runs (unique_key, tenant) nulls not distinct
  where unique_key is not null and status = 'running';
drop index pgrun.runs_unique_key_active_idx;
