-- 0006_privileges: engine settings that only an administrator may change.

-- settings holds switches of the engine that callers must not flip from a session
-- (a SET is anyone's; a row here is an administrator's). test_clock = true lets
-- pgrun.clock() honour SET pgrun.now, for test databases only.
create table pgrun.settings (
  name        text primary key,
  value       jsonb not null,
  updated_at  timestamptz not null default now()
);
