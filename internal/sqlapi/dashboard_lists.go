package sqlapi

// The dashboard's lists that do not go newest first by id: running jobs oldest start
// first, queued jobs in claim order, a run's jobs with its map children, and what the
// flags on running jobs read. Each is read by an index in its own order, keyset-paged
// (a cursor of the order's columns, never OFFSET), so its first page costs the same at
// any table size (docs/ui.md, "Speed").
//
// The windowed lists (JobsMatchingRunning, JobsMatchingQueued) read at most a window
// of index entries after the cursor and return the ones filter matches, plus the
// window's last entry when it matched nothing (matched false), so that the caller
// knows where the next window starts; seen is how many entries the window read (fewer
// than asked: the list is done).

// DashboardRunningOldest lists running jobs, the one that started first first, at
// most $1 (by jobs_running_started_idx, migration 0023, whose predicate "started_at >
// '-infinity'" each statement that reads it repeats): the overview's longest-running
// jobs.
const DashboardRunningOldest = `select ` + dashboardJobColumns + `
from pgrun.jobs j
where j.status = 'running' and j.started_at > '-infinity'
order by j.started_at, j.id
limit $1`

// JobsMatchingRunning is a window of the running jobs after the cursor ($2 started_at,
// $3 id; '-infinity' and 0 for the first), oldest start first: at most $4 index
// entries of jobs_running_started_idx (migration 0023), of which it returns the jobs
// filter $1 matches (job_matches), at most $5 of them, then the window's last entry
// if it is not among them (matched false), with seen, the entries read.
const JobsMatchingRunning = `select ` + dashboardJobColumns + `, j.seen, j.matched
from (select r.*, count(*) over () as seen, row_number() over (order by r.started_at, r.id) as rn,
             pgrun.job_matches($1::jsonb, r.id, r.queue, r.kind, r.status, r.args, r.error, r.created_at,
                               r.finished_at, r.parent_id, r.run_id) as matched
      from (select * from pgrun.jobs x
            where x.status = 'running' and x.started_at > '-infinity'
              and (x.started_at, x.id) > ($2::timestamptz, $3::bigint)
            order by x.started_at, x.id
            limit $4) r) j
where j.matched or j.rn = j.seen
order by j.started_at, j.id
limit $5 + 1`

// JobsMatchingQueued is a window of the queued jobs (due or scheduled) of queue $2
// (NULL: every queue) in claim order, priority then run_at then id, after the cursor
// ($3 priority, $4 run_at, $5 id; -32768, '-infinity' and 0 for the first): the first
// $6 entries after it of jobs_claim_idx, queue by queue (each queue reads at most $6
// entries, index only, and the first $6 of them all are kept, so none is skipped), of
// which it returns the jobs filter $1 matches, at most $7, then the window's last
// entry if it is not among them (matched false), with seen, the entries kept.
const JobsMatchingQueued = `select ` + dashboardJobColumns + `, j.seen, j.matched
from (select c.*, k.seen, k.rn,
             pgrun.job_matches($1::jsonb, c.id, c.queue, c.kind, c.status, c.args, c.error, c.created_at,
                               c.finished_at, c.parent_id, c.run_id) as matched
      from (select w.id, count(*) over () as seen, row_number() over (order by w.priority, w.run_at, w.id) as rn
            from (select x.id, x.priority, x.run_at from pgrun.queues q
                  cross join lateral (
                    select y.id, y.priority, y.run_at from pgrun.jobs y
                    where y.status = 'queued' and y.queue = q.name
                      and (y.priority, y.run_at, y.id) > ($3::smallint, $4::timestamptz, $5::bigint)
                    order by y.priority, y.run_at, y.id
                    limit $6) x
                  where $2::text is null or q.name = $2
                  order by x.priority, x.run_at, x.id
                  limit $6) w) k
      join pgrun.jobs c on c.id = k.id) j
where j.matched or j.rn = j.seen
order by j.rn
limit $7 + 1`

// JobsMatchingRunTree is a page of run $2's jobs below id $1, newest first, that
// filter $3 matches (a filter without its run key: the run is this statement's), at
// most $4: its nodes (by jobs_run_idx) and their children (map children and spawned
// jobs, which carry parent_id but no run_id), each node's by jobs_parent_idx in id
// order (migration 0023), so a map of 60,000 children costs a page, not a sort.
const JobsMatchingRunTree = `select ` + dashboardJobColumns + `
from (select n.* from pgrun.jobs n
      where n.run_id = $2 and n.id < $1
        and pgrun.job_matches($3::jsonb, n.id, n.queue, n.kind, n.status, n.args, n.error, n.created_at,
                              n.finished_at, n.parent_id, n.run_id)
      union all
      select c.* from pgrun.jobs n
      cross join lateral (
        select * from pgrun.jobs c
        where c.parent_id = n.id and c.id < $1 and c.run_id is distinct from $2
          and pgrun.job_matches($3::jsonb, c.id, c.queue, c.kind, c.status, c.args, c.error, c.created_at,
                                c.finished_at, c.parent_id, c.run_id)
        order by c.id desc
        limit $4) c
      where n.run_id = $2 and n.parent_id is null) j
order by j.id desc
limit $4`

// DashboardQueueSlots lists the queues among $1 (text[]) that have a max_running,
// with how many of their jobs run now (the count a claim compares with it, one pass
// of the running jobs): a queue whose running reached max_running holds all its
// slots, and its due jobs wait for one of them.
const DashboardQueueSlots = `select q.name as queue, q.max_running, count(j.id) as running
from pgrun.queues q
left join pgrun.jobs j on j.queue = q.name and j.status = 'running'
where q.name = any ($1::text[]) and q.max_running is not null
group by q.name, q.max_running
order by q.name`
