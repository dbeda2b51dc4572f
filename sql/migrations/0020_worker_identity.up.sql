-- 0020_worker_identity: a worker id belongs to the login role that registered it
-- (docs/security.md, "Workers"). login_role is session_user at the first
-- worker_heartbeat; every call that acts under the id (claim, report, renew,
-- heartbeat, release, and a handler's beat, progress and events) checks it
-- (pgrun.check_worker_login). A row registered before this migration has none: the
-- first login that uses the id adopts it, so runners and running jobs carry on
-- across the upgrade.
alter table pgrun.workers add column login_role name;

-- Values the API now refuses at the door (pgrun.input_bounds()) that an older
-- version accepted, brought inside the bounds, so that no stored row can make a
-- later claim or maintenance step fail: a timeout past 366 days overflowed the
-- claim's deadline (timestamp out of range) for every claim of its queue.
update pgrun.jobs set timeout = interval '366 days'
where timeout > interval '366 days' and status in ('pending', 'queued', 'running', 'waiting');
update pgrun.queues set default_timeout = interval '366 days' where default_timeout > interval '366 days';
update pgrun.queues set backoff_base = interval '366 days' where backoff_base > interval '366 days';
update pgrun.queues set backoff_max = interval '366 days' where backoff_max > interval '366 days';
update pgrun.queues set default_lease = interval '1 day' where default_lease > interval '1 day';
update pgrun.workers set cadence = interval '1 hour' where cadence > interval '1 hour';
