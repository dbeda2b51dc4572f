-- 0004_gpu: model affinity and hardware telemetry.

-- warm_wait: how long a job whose model is warm on another live worker is left for
-- that worker before any worker may take it (default 5 seconds).
alter table pgrun.queues add column warm_wait interval;
-- model_required: only a worker that has the model warm or declares it can serve it
-- may claim the job.
alter table pgrun.jobs add column model_required boolean not null default false;
-- servable: the models a worker can load (warm ones are in models).
alter table pgrun.workers add column servable text[] not null default '{}';

-- hw_metrics holds recent per-host samples (CPU, RAM, GPUs); record_hw keeps it bounded.
create table pgrun.hw_metrics (
  id         bigint generated always as identity primary key,
  host       text not null,
  at         timestamptz not null default now(),
  cpu_pct    real,
  mem_used   bigint,
  mem_total  bigint,
  gpus       jsonb not null default '[]'
);
create index hw_metrics_host_at_idx on pgrun.hw_metrics (host, at);
