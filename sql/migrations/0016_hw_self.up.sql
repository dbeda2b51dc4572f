-- 0016_hw_self: a hardware sample also holds the sampling runner's own share of its
-- host (pgrun.record_hw's self argument): {"worker", "cpu_pct", "mem_used", "source"
-- ("cgroup" or "process"), "cgroup"}. NULL where the runner could not read it, and in
-- samples recorded before.
alter table pgrun.hw_metrics add column self jsonb;
