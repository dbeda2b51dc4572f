-- 0013_failover: what a runner and the reaper need to come through a failover or an
-- outage without re-running work that need not run (docs/reliability.md).
--
-- claim_id is a token unique to each claim, set by claim_jobs with gen_random_uuid().
-- attempt stays the count of claims, but it cannot be the token: an asynchronous
-- failover undoes the claims the standby had not received, and the next claim of
-- such a job gets the same attempt number again. Reports that pass the token match
-- only that claim, and handlers see it (Job.ClaimID) to deduplicate side effects.
-- It is kept on finished jobs: it names the claim whose report finished the job.
alter table pgrun.jobs add column claim_id uuid;

-- lease_length is the length of the lease the job was last given (by the claim or a
-- renewal): after a server start or a promotion the reaper gives every lease that
-- much grace, counted from the moment it first ran on that server (server_epochs).
alter table pgrun.jobs add column lease_length interval;

-- server_epochs records each server start and each promotion (a new timeline) that
-- maintain() has seen, with the moment from which leases are judged again. The newest
-- row is the one in force; maintain() keeps the last hundred.
create table pgrun.server_epochs (
  id              bigint generated always as identity primary key,
  postmaster_at   timestamptz not null,  -- pg_postmaster_start_time() of the server
  timeline        bigint not null,       -- the WAL timeline it writes on
  since           timestamptz not null,  -- leases get their grace from here
  reason          text not null check (reason in ('start', 'promotion')),
  seen_at         timestamptz not null default now()
);
