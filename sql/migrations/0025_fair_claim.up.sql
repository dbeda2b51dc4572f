-- 0025_fair_claim: flow control per key in the claim (sql/functions/38_claim_keys.sql,
-- docs/operations.md "Fairness", "Per-key rate limits", "Priority aging").
--
-- A queue's new settings, all off (NULL) by default:
--   fair_by          round-robin across keys instead of one global order: the jobs'
--                    concurrency_key or tenant (the queue's row lock serialises the
--                    queue's fair claims; the round's place is in pgrun.fair_cursors)
--   key_rate_limit   at most this many claims per concurrency_key per key_rate_period
--                    (default 1 second), windows in pgrun.key_rate_windows
--   priority_aging   a waiting job's effective priority is its priority less one level
--                    per priority_aging it has been due
alter table pgrun.queues
  add column fair_by text check (fair_by in ('concurrency_key', 'tenant')),
  add column key_rate_limit integer check (key_rate_limit is null or key_rate_limit >= 1),
  add column key_rate_period interval,
  add column priority_aging interval check (priority_aging is null or priority_aging > interval '0');

-- fair_cursors holds, per queue with fair_by, the key its claims served last (key NULL:
-- the turn of the jobs without a key; no row: no claim yet), where the next claim's
-- round goes on. A table of its own, not a column of pgrun.queues, which every role
-- may read: in the tenant mode the key is a tenant's name. Written only by claims, under
-- the queue's row lock; it also keeps where per-key limits without fairness last walked
-- the keys with room.
create table pgrun.fair_cursors (
  queue  text primary key,
  key    text
);

-- key_rate_windows holds each key's current rate window of a queue with a
-- key_rate_limit: it opened at window_start with the key's first claim after the
-- previous window ended, and count claims were made in it. Written only by claims,
-- which hold the queue's row lock (so the counts are exact across claimers); a
-- window that has ended is reset in place by the key's next claim, and windows of
-- keys that went quiet are deleted by later claims of the queue (by window_start,
-- oldest first) and when the limit is reset. Pages are kept half full, so that a count
-- updated by every claim of its key stays on its page (a HOT update, no index entry).
create table pgrun.key_rate_windows (
  queue         text not null,
  key           text not null,
  window_start  timestamptz not null,
  count         integer not null check (count >= 0),
  primary key (queue, key)
) with (fillfactor = 50);
create index key_rate_windows_start_idx on pgrun.key_rate_windows (queue, window_start);

-- The fair claim's key walk: the keys of a queue's queued jobs in order (a skip scan,
-- one probe per key), and each key's most urgent due jobs. Partial on a key being set,
-- so a job without one (every job of a queue that uses none of this) writes no entry.
-- The concurrency key's index also serves per-key limits without fairness, where the
-- claim walks the keys with room when the front of the queue is held by keys at
-- their limit. Their keys end in the job id, so deduplication is off (0008 says why).
create index jobs_fair_key_idx on pgrun.jobs (queue, concurrency_key, priority, run_at, id)
  with (deduplicate_items = off) where status = 'queued' and concurrency_key is not null;
create index jobs_fair_tenant_idx on pgrun.jobs (queue, tenant, priority, run_at, id)
  with (deduplicate_items = off) where status = 'queued' and tenant is not null;
