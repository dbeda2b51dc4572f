-- 0005_failure_semantics: maintenance leadership that expires, the kinds a worker
-- handles, and the data rules that keep one bad row from stopping the engine.

-- maintenance_leader is the lease of the runner that calls maintain() for everybody.
-- The holder renews it every round; when it lapses (the holder died, froze or was cut
-- off) any runner takes it over. No advisory lock is involved, so no session outside
-- the engine can hold maintenance up.
create table pgrun.maintenance_leader (
  name        text primary key,
  holder      text not null,
  expires_at  timestamptz not null,
  since       timestamptz not null default now()
);

-- kinds: the job kinds a worker has handlers for; claim_jobs hands out only those, and
-- queue_stats counts queued jobs of kinds no live worker handles. NULL: any kind.
alter table pgrun.workers add column kinds text[];

-- Keys are indexed; PostgreSQL cannot index a btree entry over about 2.7 KB, so a long
-- key accepted before this version would fail every later write of its row. Such
-- keys become digests (the same key gives the same digest, so deduplication and
-- concurrency limits keep their meaning); new ones are refused at enqueue.
update pgrun.jobs set unique_key = 'md5:' || md5(unique_key) where octet_length(unique_key) > 512;
update pgrun.jobs set concurrency_key = 'md5:' || md5(concurrency_key) where octet_length(concurrency_key) > 512;

-- Events belong to a job: no event for a job that does not exist, and pruning a job
-- takes its events along.
delete from pgrun.job_events e where not exists (select 1 from pgrun.jobs j where j.id = e.job_id);
alter table pgrun.job_events
  add constraint job_events_job_fk foreign key (job_id) references pgrun.jobs (id) on delete cascade;
