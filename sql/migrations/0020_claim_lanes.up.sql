-- 0020_claim_lanes: a queue's claim lanes (set_queue(claim_lanes), 50_queues.sql).
-- A laned queue's jobs are split by id % claim_lanes, and each runner serving it
-- claims from lanes of its own through an index of that queue alone
-- (lane_index_ddl), so that runners sharing one busy queue stop stepping over the
-- rows each other's claims hold. The index is made by the queue's owner, with CREATE
-- INDEX CONCURRENTLY, not here: it is per queue, and a plain CREATE INDEX would stop
-- every enqueue while it reads the table.
alter table pgrun.queues add column claim_lanes smallint
  constraint queues_claim_lanes_check check (claim_lanes between 2 and 64);
