-- 74_histograms.sql: the log-scale histograms of wait and run times that the rollups
-- keep (74_rollups.sql, migration 0022) and how they are added up and read.
--
-- Histograms (wait_hist, run_hist): element i counts the times in [2^(i-1), 2^i)
-- milliseconds; element 1 also counts those under 1 ms, element 32 those of 2^31 ms
-- (about 25 days) and more. Trailing empty elements are left off. Histograms add up
-- element by element (hist_add), so that the percentiles of any span, queue or kind
-- are exact to a bucket: hist_quantile interpolates within the bucket, so a
-- percentile is off by less than the bucket's width (a factor of 2).

-- hist_bucket is the histogram element (1 to 32) of a time of ms milliseconds (NULL
-- for NULL): width_bucket over the bounds 2, 4, ... 2^31.
create or replace function pgrun.hist_bucket(ms float8)
returns integer
language sql
immutable
parallel safe
return width_bucket(ms, '{2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
  131072, 262144, 524288, 1048576, 2097152, 4194304, 8388608, 16777216, 33554432, 67108864, 134217728,
  268435456, 536870912, 1073741824, 2147483648}'::float8[]) + 1;

-- counts_at returns an array of at least len elements whose element idx[k] is the
-- sum of the n[k] (0 where none): a histogram from (element, count) pairs. Trailing
-- zeros past len are left off.
create or replace function pgrun.counts_at(idx integer[], n bigint[], len integer default 0)
returns integer[]
language plpgsql
immutable
parallel safe
set search_path = pgrun, pg_catalog
as $$
declare
  h    integer[];
  top  integer := len;
  k    integer;
begin
  for k in 1 .. coalesce(cardinality(idx), 0) loop
    top := greatest(top, idx[k]);
  end loop;
  if top < 1 then
    return '{}';
  end if;
  h := array_fill(0, array[top]);
  for k in 1 .. coalesce(cardinality(idx), 0) loop
    if idx[k] >= 1 then
      h[idx[k]] := h[idx[k]] + coalesce(n[k], 0);
    end if;
  end loop;
  return h;
end;
$$;

-- hist_trim returns the sums of a merged histogram as one: NULLs (a bucket no row
-- reached) as 0 and trailing zeros left off.
create or replace function pgrun.hist_trim(sums bigint[])
returns integer[]
language plpgsql
immutable
parallel safe
set search_path = pgrun, pg_catalog
as $$
declare
  top integer := coalesce(cardinality(sums), 0);
begin
  while top > 0 and coalesce(sums[top], 0) = 0 loop
    top := top - 1;
  end loop;
  return array(select coalesce(sums[i], 0)::integer from generate_series(1, top) i);
end;
$$;

-- hist_sum adds histograms a and b element by element (NULL as empty): the state
-- function of the aggregate hist_add.
create or replace function pgrun.hist_sum(a integer[], b integer[])
returns integer[]
language plpgsql
immutable
parallel safe
set search_path = pgrun, pg_catalog
as $$
declare
  s  integer[] := coalesce(a, '{}');
  i  integer;
begin
  for i in 1 .. coalesce(cardinality(b), 0) loop
    s[i] := coalesce(s[i], 0) + b[i];
  end loop;
  return s;
end;
$$;

-- hist_add sums histograms element by element, for ad hoc queries of the rollup tables:
--   select pgrun.hist_quantile(pgrun.hist_add(run_hist), 0.95) from pgrun.job_minutes
--   where kind = 'email.send' and minute > now() - interval '1 hour';
-- (rollup_series spells the sums out instead: a state function is a call per row.)
create or replace aggregate pgrun.hist_add(integer[]) (
  sfunc = pgrun.hist_sum,
  stype = integer[],
  initcond = '{}',
  parallel = safe
);

-- hist_quantile is the q-quantile (0 to 1) of histogram hist in seconds, interpolated
-- within its bucket; NULL for an empty histogram. A q out of [0, 1] raises 22023.
create or replace function pgrun.hist_quantile(hist integer[], q float8)
returns float8
language plpgsql
immutable
parallel safe
set search_path = pgrun, pg_catalog
as $$
declare
  total   bigint := 0;
  before  bigint := 0;
  target  float8;
  lo      float8;
  n       integer;
begin
  if q is null or not q between 0 and 1 then
    raise exception 'quantile % is out of bounds', coalesce(q::text, 'NULL')
      using errcode = '22023', hint = 'Pass a fraction from 0 to 1, such as 0.95 for the 95th percentile.';
  end if;
  foreach n in array coalesce(hist, '{}') loop
    total := total + coalesce(n, 0);
  end loop;
  if total = 0 then
    return null;
  end if;
  target := q * total;
  for i in 1 .. cardinality(hist) loop
    n := coalesce(hist[i], 0);
    if n > 0 and before + n >= target then
      lo := case when i = 1 then 0 else 2 ^ (i - 1) end;
      return (lo + (2 ^ i - lo) * (target - before) / n) / 1000;
    end if;
    before := before + n;
  end loop;
  return null;
end;
$$;

-- hist_summary reads merged histogram sums (rollup_series; NULL elements count as 0)
-- in one pass: n, the times counted, and their p50 and p95 in seconds as
-- hist_quantile has them (NULL when n is 0). The readers' one call per histogram.
create or replace function pgrun.hist_summary(hist bigint[], out n bigint, out p50 float8, out p95 float8)
language plpgsql
immutable
parallel safe
set search_path = pgrun, pg_catalog
as $$
declare
  c       bigint;
  before  bigint := 0;
  lo      float8;
begin
  n := 0;
  foreach c in array coalesce(hist, '{}') loop
    n := n + coalesce(c, 0);
  end loop;
  if n = 0 then
    return;
  end if;
  for i in 1 .. cardinality(hist) loop
    c := coalesce(hist[i], 0);
    if c > 0 and before + c >= 0.5 * n then
      lo := case when i = 1 then 0 else 2 ^ (i - 1) end;
      if p50 is null then
        p50 := (lo + (2 ^ i - lo) * (0.5 * n - before) / c) / 1000;
      end if;
      if before + c >= 0.95 * n then
        p95 := (lo + (2 ^ i - lo) * (0.95 * n - before) / c) / 1000;
        exit;
      end if;
    end if;
    before := before + c;
  end loop;
end;
$$;
