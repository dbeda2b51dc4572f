-- 0011_ephemeral_queues: queues whose succeeded jobs are deleted as they complete.
alter table pgrun.queues add column ephemeral boolean not null default false;
