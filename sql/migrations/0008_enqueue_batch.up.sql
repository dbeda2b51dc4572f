-- 0008_enqueue_batch: bulk enqueue (pgrun.enqueue_batch in sql/functions/enqueue_batch.sql).
--
-- The claim index's keys end in the job id, so no two are ever equal and
-- deduplication never merges anything; with it on, every full leaf page costs a
-- futile deduplication pass before it splits (about 1.5% of a bulk enqueue's time).
alter index pgrun.jobs_claim_idx set (deduplicate_items = off);
