-- 0028_claim_front: where the claims of a queue with flow control per key resume
-- their look at the queue's front (39_claim_keyed.sql, "The front").
--
-- A claim that reads a queue's due jobs in the queue's order from its first entry
-- steps over every job claimed since the last vacuum: their entries stay in the claim
-- index, dead, until vacuum removes them, and with a snapshot held somewhere vacuum
-- cannot. The runner's plain claims resume after the last job they claimed
-- (claim_jobs' after_*); the per-key claims run under the queue's row lock, so the
-- queue can keep one resume point for all its claimers instead:
--   front_priority, front_run_at, front_id   the look starts after this position of
--                                            the queue's order (NULL: at its start)
--   front_swept_at                           when a look last started at the start,
--                                            which one does at least every 250 ms
--   keyless_at                               a fair queue's turn of the jobs without
--                                            a key that found none is skipped until
--                                            then (NULL: not skipped)
--   pruned_at                                when a claim last deleted the rate
--                                            windows of keys gone quiet (once a
--                                            second at most)
alter table pgrun.fair_cursors
  add column front_priority smallint,
  add column front_run_at   timestamptz,
  add column front_id       bigint,
  add column front_swept_at timestamptz,
  add column keyless_at     timestamptz,
  add column pruned_at      timestamptz;
