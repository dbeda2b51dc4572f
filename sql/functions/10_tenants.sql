-- 10_tenants.sql: the optional tenant mode. With it on, every job and run carries the
-- tenant of the session that enqueued or started it, and row-level security lets an
-- enqueuer see, cancel and attach to (submit input to, replace by unique key) only
-- its own tenant's rows; workers and administrators see all. The tenant comes from
-- the session's role through pgrun.tenant_roles, written by an administrator, never
-- from the caller's say-so.
--
-- The mode is the row-level security flag of pgrun.jobs: set_tenant_mode turns it on
-- or off for the four tables at once and adds or drops the insert trigger that stamps
-- the tenant, so with the mode off the enqueue path pays nothing for it.

-- caller_role is the role a call is attributed to: the role set with SET ROLE, or else
-- the login role. Inside the engine's SECURITY DEFINER functions current_user is the
-- engine, so the session's role is the only trustworthy name of the caller (SET ROLE
-- is checked by the server against the login role's memberships; it cannot be
-- changed inside a SECURITY DEFINER function). A call made from within another
-- role's SECURITY DEFINER function is attributed to the session's role.
create or replace function pgrun.caller_role()
returns oid
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
begin
  -- PL/pgSQL, not SQL: a SQL function with SET is planned on every call, and these
  -- helpers run once per enqueued row in the tenant mode. to_regrole reads the
  -- catalog cache.
  return coalesce(to_regrole(quote_ident(nullif(current_setting('role'), 'none'))),
                  to_regrole(quote_ident(session_user::text)))::oid;
end;
$$;

-- tenant_mode reports whether the tenant mode is on.
create or replace function pgrun.tenant_mode()
returns boolean
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
begin
  return (select c.relrowsecurity from pg_class c where c.oid = 'pgrun.jobs'::regclass);
end;
$$;

-- administers is a capability: granted to pgrun_admin only, so that "may this role
-- execute administers()" answers "is this role an administrator" whatever the role
-- names are (they can be prefixed).
create or replace function pgrun.administers()
returns boolean
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select true $$;

-- sees_all reports whether the caller is exempt from tenant scoping: the engine's
-- owner (or a member of it, or a superuser) or an administrator.
create or replace function pgrun.sees_all()
returns boolean
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  r oid := pgrun.caller_role();
begin
  return pg_has_role(r, (select c.relowner from pg_class c where c.oid = 'pgrun.jobs'::regclass), 'MEMBER')
         or has_function_privilege(r, 'pgrun.administers()', 'EXECUTE');
end;
$$;

-- caller_tenant is the calling session's tenant: the one tenant mapped to its role or
-- to a role it is a member of; NULL if none. A role mapped to several tenants names
-- one with SET pgrun.tenant = '...' (only a tenant it is mapped to: 42501 otherwise).
-- SECURITY DEFINER (tenant_roles is readable by administrators only); the row-level
-- security policies call it once per statement.
create or replace function pgrun.caller_tenant()
returns text
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  me    oid := pgrun.caller_role();
  mine  text[];
  pick  text := nullif(current_setting('pgrun.tenant', true), '');
begin
  select array_agg(distinct t.tenant order by t.tenant) into mine
  from pgrun.tenant_roles t
  where pg_has_role(me, to_regrole(quote_ident(t.role)), 'MEMBER'); -- NULL (false) for a dropped role
  if mine is null then
    return null;
  end if;
  if pick is not null then
    if pick <> all (mine) then
      raise exception 'role % may not act for tenant %', me::regrole, quote_literal(pick)
        using errcode = '42501',
              hint = format('Its tenants: %s. SET pgrun.tenant to one of them, or RESET pgrun.tenant.', array_to_string(mine, ', '));
    end if;
    return pick;
  end if;
  if cardinality(mine) > 1 then
    raise exception 'role % acts for several tenants (%): the session must pick one', me::regrole,
      array_to_string(mine, ', ')
      using errcode = '42501', hint = 'SET pgrun.tenant = ''<tenant>''; to one of them before enqueuing.';
  end if;
  return mine[1];
end;
$$;

-- session_tenant is the tenant the calling session's new jobs and runs get: NULL with
-- the mode off, or for an administrator or the engine's owner without a tenant.
-- Anyone else without a tenant is refused (42501): in tenant mode every enqueuer's
-- row belongs to someone.
create or replace function pgrun.session_tenant()
returns text
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  t text;
begin
  if not pgrun.tenant_mode() then
    return null;
  end if;
  t := pgrun.caller_tenant();
  if t is null and not pgrun.sees_all() then
    raise exception 'role % has no tenant, and the tenant mode is on', pgrun.caller_role()::regrole
      using errcode = '42501',
            hint = 'An administrator maps it to one: SELECT pgrun.grant_tenant(''<role>'', ''<tenant>'');';
  end if;
  return t;
end;
$$;

-- new_job_tenant is the tenant a job inserted now, under parent parent_id (or none),
-- gets: its parent's (a child always belongs to its parent's tenant), NULL for the
-- engine's own inserts that name none, the session's otherwise. The insert trigger
-- stamps it, and the enqueue functions look for unique-key holders within it.
create or replace function pgrun.new_job_tenant(parent_id bigint)
returns text
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
begin
  if not pgrun.tenant_mode() then
    return null;
  end if;
  if parent_id is not null then
    return (select p.tenant from pgrun.jobs p where p.id = new_job_tenant.parent_id);
  end if;
  if pgrun.is_engine() then
    return null;
  end if;
  return pgrun.session_tenant();
end;
$$;

-- may_touch reports whether the caller may see and act on a row of tenant t: always
-- with the mode off (the roles decide), else if it sees all or t is its tenant.
-- The engine's SECURITY DEFINER functions that an enqueuer calls (job_timeline,
-- cancel_job, cancel_run, submit_input, replace_queued) check it, since row-level
-- security does not apply to them.
create or replace function pgrun.may_touch(t text)
returns boolean
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
begin
  return not pgrun.tenant_mode() or pgrun.sees_all() or t = pgrun.caller_tenant();
end;
$$;

-- check_may_cancel raises 42501 unless the caller may cancel what (a job or run it
-- may touch, see may_touch): administrators and the owner may, an enqueuer only in the
-- tenant mode (its own tenant's; may_touch already hid the others').
create or replace function pgrun.check_may_cancel(what text)
returns void
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
begin
  if not pgrun.sees_all() and not pgrun.tenant_mode() then
    raise exception 'cancelling % needs pgrun_admin', what
      using errcode = '42501',
            hint = 'Ask an administrator, or turn on the tenant mode, in which an enqueuer cancels its own tenant''s jobs and runs.';
  end if;
end;
$$;

-- jobs_tenant stamps a new job that names no tenant with new_job_tenant. Present only
-- while the mode is on (set_tenant_mode adds it). A row that names a tenant keeps it:
-- the engine's own inserts name the right one (start_run's nodes, enqueue_jobs'
-- batches, which work the tenant out once per statement instead of once per row), and
-- an enqueuer's is held to its own by the row-level security policy's WITH CHECK,
-- which the server applies after this trigger.
create or replace function pgrun.jobs_tenant()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  if new.tenant is null then
    new.tenant := pgrun.new_job_tenant(new.parent_id);
  end if;
  return new;
end;
$$;

-- set_tenant_mode turns the tenant mode on or off and returns whether it was on.
-- On: row-level security on jobs, runs, job_events and run_inputs (policies from
-- grant_roles) and the stamping trigger; off: neither. Takes an ACCESS EXCLUSIVE
-- lock on those tables for a moment (it waits for running statements on them).
-- Rows enqueued with the mode off have no tenant: only administrators and workers see
-- them once it is on (an owner may UPDATE pgrun.jobs SET tenant = ... to assign them).
create or replace function pgrun.set_tenant_mode(enabled boolean)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  was  boolean := pgrun.tenant_mode();
begin
  if enabled is null then
    raise exception 'tenant mode must be true or false, got NULL'
      using errcode = '22023', hint = 'SELECT pgrun.set_tenant_mode(true); turns it on.';
  end if;
  if enabled = was then
    return was;
  end if;
  drop trigger if exists jobs_tenant on pgrun.jobs;
  if enabled then
    alter table pgrun.jobs enable row level security;
    alter table pgrun.runs enable row level security;
    alter table pgrun.job_events enable row level security;
    alter table pgrun.run_inputs enable row level security;
    -- Only rows that name no tenant reach it: enqueue_batch names the tenant once
    -- per statement, and row-level security checks it.
    create trigger jobs_tenant before insert on pgrun.jobs
      for each row when (new.tenant is null) execute function pgrun.jobs_tenant();
  else
    alter table pgrun.jobs disable row level security;
    alter table pgrun.runs disable row level security;
    alter table pgrun.job_events disable row level security;
    alter table pgrun.run_inputs disable row level security;
  end if;
  return was;
end;
$$;

-- check_tenant_name raises 22023 unless t is a tenant name: 1 to 200 characters.
create or replace function pgrun.check_tenant_name(t text)
returns text
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if t is null or length(t) not between 1 and 200 then
    raise exception 'tenant % is not valid', coalesce(quote_literal(left(t, 40)), 'NULL')
      using errcode = '22023', hint = 'A tenant is a name of 1 to 200 characters, such as ''billing''.';
  end if;
  return t;
end;
$$;

-- grant_tenant maps role to tenant: sessions of role (or of its members) enqueue for
-- and see tenant. Returns true if the mapping is new. 42704 for an unknown role.
create or replace function pgrun.grant_tenant(role name, tenant text)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
begin
  if role is null or not exists (select 1 from pg_roles r where r.rolname = grant_tenant.role) then
    raise exception 'role % does not exist', coalesce(quote_literal(role), 'NULL')
      using errcode = '42704', hint = 'Create it first (CREATE ROLE ... IN ROLE pgrun_enqueuer), then map it.';
  end if;
  perform pgrun.check_tenant_name(tenant);
  insert into pgrun.tenant_roles (role, tenant) values (grant_tenant.role, grant_tenant.tenant)
  on conflict do nothing;
  return found;
end;
$$;

-- revoke_tenant removes role's mapping to tenant (every mapping of role if tenant is
-- NULL) and returns how many it removed.
create or replace function pgrun.revoke_tenant(role name, tenant text default null)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  n integer;
begin
  delete from pgrun.tenant_roles t
  where t.role = revoke_tenant.role and (revoke_tenant.tenant is null or t.tenant = revoke_tenant.tenant);
  get diagnostics n = row_count;
  return n;
end;
$$;
