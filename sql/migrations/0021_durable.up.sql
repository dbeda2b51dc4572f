-- 0021_durable: durable execution (docs/durable.md, sql/functions/35_durable.sql).
--
-- job_steps records what a job's handler has done, by step name, in the order first
-- recorded (position): a step's result, a sleep's end, an event's payload, a spawned
-- child's id, an awaited job's outcome. Written only under the job's current claim
-- (or in the handler's own transaction); read back on every later attempt, so that
-- nothing recorded runs again. Pruned with its job (prune_history); no foreign key,
-- so that deleting jobs (retention, ephemeral queues) pays no per-row check.
create table pgrun.job_steps (
  job_id       bigint not null,
  name         text not null,
  position     integer not null,
  kind         text not null default 'step' check (kind in ('step', 'sleep', 'event', 'spawn', 'job')),
  attempt      integer not null,
  claim_id     uuid,
  result       jsonb,
  recorded_at  timestamptz not null default now(),
  primary key (job_id, name),
  unique (job_id, position)
);

-- events are what emit_event sent, by tenant ('' outside the tenant mode) and name:
-- the first emit of a name wins, and a job that awaits it later finds it here.
create table pgrun.events (
  tenant      text not null default '',
  name        text not null,
  payload     jsonb,
  emitted_at  timestamptz not null default now(),
  primary key (tenant, name)
);
create index events_emitted_idx on pgrun.events (emitted_at);

-- job_waits are the parked awaits: job_id waits (status waiting) for event, or for
-- awaited_job to finish, until until (then timed_out, and the job is queued again);
-- a row with job_id NULL is a client waiting for awaited_job (Client.Wait), told on
-- channel pgrun_done. A row goes when it is answered.
create table pgrun.job_waits (
  id           bigint generated always as identity primary key,
  job_id       bigint,
  step         text,
  event        text,
  awaited_job  bigint,
  tenant       text not null default '',
  until        timestamptz,
  timed_out    boolean not null default false,
  created_at   timestamptz not null default now()
);
create index job_waits_event_idx on pgrun.job_waits (event) where event is not null;
create index job_waits_awaited_idx on pgrun.job_waits (awaited_job) where awaited_job is not null;
create index job_waits_until_idx on pgrun.job_waits (until) where not timed_out and until is not null;
create unique index job_waits_job_step_idx on pgrun.job_waits (job_id, step) where job_id is not null;

insert into pgrun.maintenance_steps (step, every) values ('wake_waits', interval '0')
on conflict (step) do nothing;
