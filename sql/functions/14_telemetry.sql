-- 14_telemetry.sql: per-host hardware samples, kept bounded.

-- record_hw stores one sample for host (CPU %, memory in bytes, GPUs as a JSON array
-- of {index, name, memory_total, memory_used, utilization}), deletes that host's
-- samples older than keep, and sends the sample on channel pgrun_hw. self, when given,
-- is the sampling runner's own share of the host, a JSON object such as {"worker":
-- "...", "cpu_pct": 12.5, "mem_used": 104857600, "source": "cgroup", "cgroup":
-- "/system.slice/pgrun.service"} (source "process" where its cgroup was not readable);
-- the rest of the host is the sample's figures minus it (view host_status). Returns
-- the sample's id.
create or replace function pgrun.record_hw(
  host      text,
  cpu_pct   real,
  mem_used  bigint,
  mem_total bigint,
  gpus      jsonb default '[]',
  keep      interval default interval '1 hour',
  self      jsonb default null
)
returns bigint
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now timestamptz := pgrun.clock();
  v_id  bigint;
begin
  if host is null or host = '' then
    raise exception 'host must not be empty'
      using errcode = '22023', hint = 'Pass the host name the sample was taken on.';
  end if;
  if gpus is null or jsonb_typeof(gpus) <> 'array' then
    raise exception 'gpus must be a JSON array, got %', coalesce(jsonb_typeof(gpus), 'NULL')
      using errcode = '22023', hint = 'Pass ''[]'' when the host has no GPU.';
  end if;
  if self is not null and (jsonb_typeof(self) <> 'object'
                           or jsonb_typeof(self -> 'cpu_pct') is distinct from 'number'
                           or jsonb_typeof(self -> 'mem_used') is distinct from 'number') then
    raise exception 'self must be a JSON object with numbers cpu_pct and mem_used, got %', left(self::text, 200)
      using errcode = '22023', hint = 'Pass NULL when the runner''s own share is unknown.';
  end if;
  perform pgrun.check_json_size('self', self);
  insert into pgrun.hw_metrics (host, at, cpu_pct, mem_used, mem_total, gpus, self)
  values (record_hw.host, v_now, cpu_pct, mem_used, mem_total, gpus, record_hw.self)
  returning id into v_id;
  delete from pgrun.hw_metrics m where m.host = record_hw.host and m.at < v_now - keep;
  perform pg_notify('pgrun_hw', jsonb_build_object('host', host, 'at', v_now, 'cpu_pct', cpu_pct,
    'mem_used', mem_used, 'mem_total', mem_total, 'gpus', gpus, 'self', record_hw.self)::text);
  return v_id;
end;
$$;
