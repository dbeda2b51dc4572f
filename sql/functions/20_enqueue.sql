-- 20_enqueue.sql: how a job enters the engine (21_enqueue_batch.sql has the batch forms).
-- A plain INSERT INTO pgrun.jobs is an enqueue too: the BEFORE trigger validates it
-- and fills defaults, the AFTER statement trigger registers the queue and sends the
-- wake-up NOTIFY inside the writer's transaction (a rolled-back enqueue wakes nobody).

-- job_spec_fault names the first rule spec s breaks ('kind', 'queue', 'args', 'args
-- size', 'priority', 'run_at', 'max_attempts', 'unique_key', 'timeout', 'meta', 'meta
-- size', 'concurrency_key', 'unique_window', 'on_conflict', 'sequence_key',
-- 'debounce_key', 'debounce', 'debounce_edge', 'parent_id'), or returns NULL when it
-- breaks none. A NULL field is the default and breaks nothing, except a NULL kind, and
-- a debounce_key without a debounce window, which is the last rule: a plain INSERT
-- cannot debounce (enqueue_debounced's own insert is let through by the trigger). This is the one statement of the rules: enqueue_columns checks every spec
-- of a batch with it, the insert trigger checks every row with it, and check_job_spec
-- raises the error for what it names.
--
-- A plain SQL expression with a body bound when it is created (no SET clause, which
-- would stop it): PostgreSQL inlines it into the calling statement, so a batch of
-- 10,000 specs is checked in one scan at the cost of the comparisons, not of 10,000
-- function calls, and the caller's search_path cannot change what it means. (The
-- trigger's WHEN clause spells the rules out instead; see there.)
create or replace function pgrun.job_exists(id bigint)
returns boolean
language sql
stable
set search_path = pgrun, pg_catalog
as $$ select exists (select 1 from pgrun.jobs j where j.id = job_exists.id) $$;

-- max_flow_key_chars bounds sequence_key and debounce_key: 200 characters (they are
-- indexed and appear in every hold reason); min_debounce is the shortest debounce
-- window, 10 ms (a shorter one folds nothing a caller could notice). Bodies bound when
-- created, inlined into job_spec_fault as constants (as max_key_bytes).
create or replace function pgrun.max_flow_key_chars()
returns integer
language sql
immutable
parallel safe
return 200;

create or replace function pgrun.min_debounce()
returns interval
language sql
immutable
parallel safe
return interval '10 milliseconds';

create or replace function pgrun.job_spec_fault(s pgrun.job_spec)
returns text
language sql
stable
parallel safe
-- The pattern has no bounded repeat (the length is checked apart): {0,127} makes
-- PostgreSQL's regex engine several times slower.
return case
  when s.kind is null or s.kind !~ '^[A-Za-z][A-Za-z0-9_.:/-]*$' or octet_length(s.kind) > 128 then 'kind'
  when not pgrun.valid_queue_name(s.queue) then 'queue'
  when jsonb_typeof(s.args) <> 'object' then 'args'
  when pg_column_size(s.args) > pgrun.max_json_bytes() then 'args size'
  when s.priority not between pgrun.min_priority() and pgrun.max_priority() then 'priority'
  when not isfinite(s.run_at) then 'run_at'
  when s.max_attempts < 1 then 'max_attempts'
  when s.unique_key = '' or octet_length(s.unique_key) > pgrun.max_key_bytes() then 'unique_key'
  when s.timeout < interval '0' or s.timeout > pgrun.max_wait() then 'timeout'
  when jsonb_typeof(s.meta) <> 'object' then 'meta'
  when pg_column_size(s.meta) > pgrun.max_json_bytes() then 'meta size'
  when s.concurrency_key = '' or octet_length(s.concurrency_key) > pgrun.max_key_bytes() then 'concurrency_key'
  when s.unique_window <= interval '0' or s.unique_window > pgrun.max_wait() then 'unique_window'
  when s.on_conflict not in ('ignore', 'replace') then 'on_conflict'
  when s.sequence_key = '' or char_length(s.sequence_key) > pgrun.max_flow_key_chars() then 'sequence_key'
  when s.debounce_key = '' or char_length(s.debounce_key) > pgrun.max_flow_key_chars() then 'debounce_key'
  when s.debounce < pgrun.min_debounce() or s.debounce > pgrun.max_wait()
       or (s.debounce is not null and (s.debounce_key is null or s.run_at is not null)) then 'debounce'
  when s.debounce_edge not in ('trailing', 'leading') or (s.debounce_edge is not null and s.debounce is null) then 'debounce_edge'
  when s.parent_id is not null and not pgrun.job_exists(s.parent_id) then 'parent_id'
  when s.debounce_key is not null and s.debounce is null then 'debounce_key'
end;

-- check_job_spec raises 22023 for the first rule spec s breaks (job_spec_fault's),
-- naming the bad value, with a HINT; it returns without a word when s breaks none.
-- element, when given, is s's place in a batch (counted from 0, as in the Go client's
-- slice) and opens the message.
create or replace function pgrun.check_job_spec(s pgrun.job_spec, element integer default null)
returns void
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  what  text := pgrun.job_spec_fault(s);
  at    text := case when element is not null then format('element %s of the batch: ', element) else '' end;
  key   text;
begin
  case what
    when 'kind' then
      raise exception '%job kind % is not valid', at, coalesce(quote_literal(s.kind), 'NULL')
        using errcode = '22023',
              hint = 'Use 1 to 128 characters from letters, digits, _ . : / - starting with a letter.';
    when 'queue' then
      raise exception '%queue name % is not valid', at, quote_literal(s.queue)
        using errcode = '22023',
              hint = 'Use 1 to 63 characters from a-z, 0-9, _, - and . starting with a letter.';
    when 'args', 'meta' then
      raise exception '%', at || format('%s of job kind %s must be a JSON object, got %s', what, s.kind,
        jsonb_typeof(case when what = 'args' then s.args else s.meta end))
        using errcode = '22023',
              hint = case when what = 'args' then 'Wrap the value in an object, for example {"value": ...}.'
                          else 'Pass an object such as {"tenant": "acme"}.' end;
    when 'args size', 'meta size' then
      raise exception '%', at || format('%s of job kind %s is %s bytes, over the limit of %s bytes',
        split_part(what, ' ', 1), s.kind,
        pg_column_size(case when what = 'args size' then s.args else s.meta end), pgrun.max_json_bytes())
        using errcode = '22023',
              hint = 'Keep payloads small: store large data in a table or object store and pass its key.';
    when 'priority' then
      raise exception '%priority % is not valid', at, s.priority
        using errcode = '22023', hint = format('Use %s (the default, most urgent) up to %s; lower runs first.',
                                                pgrun.min_priority(), pgrun.max_priority());
    when 'run_at' then
      raise exception '%run_at % is not a finite time', at, s.run_at
        using errcode = '22023',
              hint = 'Pass a real instant, or NULL for now; to hold a job back, enqueue it later or pause its queue.';
    when 'max_attempts' then
      raise exception '%max_attempts % is not valid', at, s.max_attempts
        using errcode = '22023', hint = 'Use 1 or more; 1 means no retries.';
    when 'timeout' then
      raise exception '%timeout % is out of bounds', at, s.timeout
        using errcode = '22023',
              hint = format('Pass a positive interval up to %s such as ''10 minutes'', 0 for no timeout, or NULL for the queue''s default.',
                            pgrun.max_wait());
    when 'unique_key', 'concurrency_key' then
      key := case when what = 'unique_key' then s.unique_key else s.concurrency_key end;
      raise exception '%', at || what || ' ' ||
        case when key = '' then 'must not be empty'
             else format('is %s bytes, over the limit of %s bytes', octet_length(key), pgrun.max_key_bytes()) end
        using errcode = '22023',
              hint = format('Pass NULL for no %s, or a non-empty key; for a long natural key pass a digest such as md5(...).', what);
    when 'unique_window' then
      raise exception '%unique_window % is out of bounds', at, s.unique_window
        using errcode = '22023', hint = format('Pass a positive interval up to %s such as ''1 hour'', or NULL for none.',
                                               pgrun.max_wait());
    when 'on_conflict' then
      raise exception '%on_conflict % is not valid', at, quote_literal(s.on_conflict)
        using errcode = '22023',
              hint = 'Use ignore (return the holder as it is) or replace (update a queued holder''s args).';
    when 'sequence_key', 'debounce_key' then
      key := case when what = 'sequence_key' then s.sequence_key else s.debounce_key end;
      if what = 'debounce_key' and key <> '' and char_length(key) <= pgrun.max_flow_key_chars() then -- alone
        raise exception '%debounce_key % needs a debounce window', at, quote_literal(key)
          using errcode = '22023',
                hint = 'Debounce with pgrun.enqueue_job(kind, ..., debounce_key => ..., debounce => ''5 seconds'') or the batch forms; a plain INSERT cannot debounce.';
      end if;
      raise exception '%', at || what || ' ' ||
        case when key = '' then 'must not be empty'
             else format('is %s characters, over the limit of %s characters', char_length(key), pgrun.max_flow_key_chars()) end
        using errcode = '22023',
              hint = format('Pass NULL for no %s, or a key of 1 to %s characters such as ''account:42''; for a long natural key pass a digest such as md5(...).',
                            what, pgrun.max_flow_key_chars());
    when 'debounce' then
      if s.debounce_key is null and s.debounce between pgrun.min_debounce() and pgrun.max_wait() then
        raise exception '%debounce % needs a debounce_key', at, s.debounce
          using errcode = '22023',
                hint = 'Pass debounce_key => ''reindex:7'' with it: the enqueues of one key within the window fold into one job.';
      elsif s.run_at is not null and s.debounce between pgrun.min_debounce() and pgrun.max_wait() then
        raise exception '%run_at % cannot be combined with debounce', at, s.run_at
          using errcode = '22023',
                hint = 'A debounced job runs when its window ends (trailing) or at once (leading): leave run_at out.';
      end if;
      raise exception '%debounce % is out of bounds', at, s.debounce
        using errcode = '22023',
              hint = format('Pass an interval from %s to %s such as ''5 seconds'', or NULL for no debounce.',
                            pgrun.min_debounce(), pgrun.max_wait());
    when 'debounce_edge' then
      raise exception '%debounce_edge % is not valid%', at, quote_literal(s.debounce_edge),
        case when s.debounce is null and s.debounce_edge in ('trailing', 'leading') then ' without debounce' else '' end
        using errcode = '22023',
              hint = 'Use trailing (the default: the enqueues of a window fold into one job that runs when it ends) or leading (the first runs at once, the rest of the window is dropped), with debounce.';
    when 'parent_id' then
      raise exception '%parent job % does not exist', at, s.parent_id
        using errcode = '22023',
              hint = 'Attach children to an existing job (pgrun.defer_job does it for the job a worker holds).';
    else
      null; -- no fault
  end case;
end;
$$;

-- jobs_before_insert validates a new job row, fills its defaults and resets the fields
-- only the engine may set. Raises 22023 naming the bad value (check_job_spec's
-- errors; 42501 for an engine-owned value set by anyone but the engine); nothing is
-- written.
--
-- The trigger's WHEN clause below skips it for a row that is already complete and
-- valid, one it would leave exactly as it is: enqueue_columns fills every default
-- set-wise, so its rows cost a few comparisons each instead of a function call. The
-- clause reads nothing but the row (no session setting, no role), so a caller's
-- plain INSERT gets the same treatment: a row the trigger would change or refuse
-- always reaches it.
create or replace function pgrun.jobs_before_insert()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  spec   pgrun.job_spec;
  fault  text;
begin
  new.queue := coalesce(new.queue, 'default');
  new.args := coalesce(new.args, '{}');
  new.meta := coalesce(new.meta, '{}');
  new.priority := coalesce(new.priority, 0);
  new.model_required := coalesce(new.model_required, false);
  -- Defaults: the queue's, then the engine's. The timeout is the job's wall-clock
  -- backstop: NULL takes the queue's default_timeout, then default_timeout() (one
  -- hour); an explicit 0 means none and is stored as NULL. The queue is read only
  -- when a default is missing.
  if new.max_attempts is null or new.timeout is null then
    select coalesce(new.max_attempts, q.default_max_attempts, 25),
           coalesce(new.timeout, q.default_timeout, pgrun.default_timeout())
    into new.max_attempts, new.timeout
    from (select 1) one left join pgrun.queues q on q.name = new.queue;
  end if;
  -- The rules of every enqueue (job_spec_fault), inlined here; the error is raised
  -- only when one is broken.
  spec := row(new.kind, new.args, new.queue, new.priority, new.run_at, new.max_attempts, new.unique_key,
              new.parent_id, new.model, new.timeout, new.meta, new.concurrency_key, null, null,
              new.model_required, new.sequence_key, new.debounce_key, null, null)::pgrun.job_spec;
  fault := pgrun.job_spec_fault(spec);
  -- A debounce_key without a window is refused (a plain INSERT cannot debounce),
  -- except in enqueue_debounced's own insert, which says so for its statement.
  if fault is not null
     and not (fault = 'debounce_key' and new.debounce_key <> ''
              and char_length(new.debounce_key) <= pgrun.max_flow_key_chars()
              and coalesce(current_setting('pgrun.debouncing', true), '') = 'on') then
    perform pgrun.check_job_spec(spec);
  end if;
  if new.timeout = interval '0' then
    new.timeout := null;
  end if;
  -- Engine-owned columns: only the engine's own functions (running as the owner of
  -- pgrun.jobs) set them; a caller's INSERT sets its own fields and no others.
  -- Column privileges refuse most for pgrun_enqueuer already; this holds for any
  -- grant. Children are attached only by defer_job, for the worker holding the parent.
  -- (The role is looked up only when such a value is present: the common enqueue
  -- pays nothing for this check.)
  if new.parent_id is not null and not pgrun.is_engine() then
    raise exception 'a job cannot be attached to parent % by an insert', new.parent_id
      using errcode = '42501',
            hint = 'Children are attached by pgrun.defer_job, called by the worker that holds the parent.';
  end if;
  if (coalesce(new.status, 'queued') <> 'queued' or new.run_id is not null or new.node is not null
      or new.dispatched_at is not null or coalesce(new.children_failed, 0) <> 0
      or coalesce(new.deps_remaining, 0) <> 0 or new.failure_ratio is not null
      or coalesce(cardinality(new.child_errors), 0) <> 0)
     and not pgrun.is_engine() then
    raise exception 'an insert may set only the caller''s fields of a job'
      using errcode = '42501',
            hint = 'Set kind, args, queue, priority, run_at, max_attempts, unique_key, model, model_required, timeout, meta, concurrency_key, sequence_key; the engine sets the rest.';
  end if;
  new.status := coalesce(new.status, 'queued');
  if new.status not in ('queued', 'pending', 'waiting') then
    raise exception 'a new job cannot start in status %', new.status
      using errcode = '22023',
            hint = 'Insert jobs as queued (the default); the engine moves them on.';
  end if;
  -- A job of a sequence (36_sequences.sql) is its head, queued, or held, pending, behind
  -- the job that is. It is decided here, under the sequence's lock, so that every way
  -- in (the enqueue functions, a plain INSERT, a child of defer_job) follows one rule.
  if new.sequence_key is not null then
    if new.run_id is not null or new.status <> 'queued' then
      raise exception 'a job with sequence_key % cannot start as %', quote_literal(new.sequence_key),
        case when new.run_id is not null then 'a node of a workflow run' else new.status::text end
        using errcode = '22023',
              hint = 'Enqueue a sequence''s jobs as queued (the default): the engine holds each behind the one before it. Workflow nodes take no sequence_key.';
    end if;
    if new.tenant is null and pgrun.tenant_mode() then
      new.tenant := pgrun.new_job_tenant(new.parent_id); -- as jobs_tenant would, after this trigger
    end if;
    new.status := pgrun.sequence_admit(new.queue, new.sequence_key, new.tenant);
  end if;
  if new.run_at is null then
    -- Per row, so pgrun.clock() without its call (about 2 us) when the test seam is
    -- not in use.
    new.run_at := case when coalesce(current_setting('pgrun.now', true), '') = '' then now() else pgrun.clock() end;
  end if;
  new.attempt := 0;
  new.failures := 0;
  new.lease_expiries := 0;
  new.claimed_by := null;
  new.lease_expires_at := null;
  new.claim_id := null;
  new.lease_length := null;
  new.heartbeat_at := null;
  new.started_at := null;
  new.finished_at := null;
  new.result := null;
  new.error := null;
  new.progress_current := 0;
  return new;
end;
$$;

-- The row is complete and valid when it breaks none of job_spec_fault's rules, has
-- every default filled (nothing NULL that the trigger would fill, no timeout of 0 to
-- store as NULL) and holds the engine's starting values. "IS NOT TRUE": a NULL
-- anywhere runs the trigger.
--
-- The rules are spelled out here rather than called: a call to job_spec_fault would
-- be inlined when each INSERT statement is planned, about 0.1 ms a statement (a third
-- of a one-row insert). The clause only decides whether the trigger runs, and the
-- trigger checks with job_spec_fault itself; a rule left out here would let a complete
-- row past. tests/invariant_enqueue_paths_test.go inserts a complete row breaking each
-- of job_spec_fault's rules (the rules read from the function) and requires the
-- trigger's refusal, so the two cannot drift apart. The shared rules are written out
-- too (valid_queue_name's format, min_priority(), max_json_bytes(), max_key_bytes()
-- and max_wait() as numbers): each call here would be inlined again for every
-- statement (tests/enqueue_bulk_test.go checks the limits against the functions). A
-- row with a sequence_key or a debounce_key always reaches the function, which holds
-- or admits it (sequence_admit), so their rules are not spelled out here.
select pgrun.ensure_ddl('trigger', 'jobs_before_insert', 'pgrun.jobs', $ddl$
create or replace trigger jobs_before_insert
  before insert on pgrun.jobs
  for each row
  when ((new.kind ~ '^[A-Za-z][A-Za-z0-9_.:/-]*$' and octet_length(new.kind) <= 128
         and new.queue ~ '^[a-z][a-z0-9_.-]*$' and octet_length(new.queue) <= 63
         and jsonb_typeof(new.args) = 'object' and pg_column_size(new.args) <= 1048576
         and jsonb_typeof(new.meta) = 'object' and pg_column_size(new.meta) <= 1048576
         and new.priority >= 0
         and new.max_attempts >= 1
         and new.timeout > interval '0' and new.timeout <= interval '366 days'
         and isfinite(new.run_at)
         and (new.unique_key is null or octet_length(new.unique_key) between 1 and 512)
         and (new.concurrency_key is null or octet_length(new.concurrency_key) between 1 and 512)
         and new.model_required is not null
         and new.parent_id is null
         and new.sequence_key is null and new.debounce_key is null
         and new.status = 'queued' and new.run_id is null and new.node is null
         and new.dispatched_at is null and new.children_failed = 0 and new.deps_remaining = 0
         and new.failure_ratio is null and cardinality(new.child_errors) = 0
         and new.attempt = 0 and new.failures = 0 and new.lease_expiries = 0
         and new.claimed_by is null and new.lease_expires_at is null and new.heartbeat_at is null
         and new.claim_id is null and new.lease_length is null
         and new.started_at is null and new.finished_at is null and new.result is null
         and new.error is null and new.progress_current = 0) is not true)
  execute function pgrun.jobs_before_insert();
$ddl$);

-- jobs_after_insert registers new queues and wakes listeners once per queue per
-- statement. pg_notify is transactional: the wake-up is delivered on commit only.
-- With the tenant mode off it also refuses rows that name a tenant, unless the engine's
-- owner inserted them (with the mode on, row-level security holds an enqueuer to its
-- own tenant): a label written now would grant access once the mode is turned on.
create or replace function pgrun.jobs_after_insert()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  q        text;
  tenants  boolean;
  front    text;
begin
  -- The payload is the queue, a space, and a key no new job of it sorts before:
  -- "priority run_at_microseconds id", each the statement's least (see docs/sql-api.md).
  -- A runner resuming its claims after a key (claim_jobs' after_*) starts again from
  -- the queue's start when the payload's key is below its own.
  for q, tenants, front in
    select n.queue, bool_or(n.tenant is not null),
           format('%s %s %s', min(n.priority), (extract(epoch from min(n.run_at)) * 1000000)::bigint, min(n.id))
    from new_rows n group by n.queue
  loop
    if tenants and not pgrun.tenant_mode() and not pgrun.sees_all() then
      raise exception 'a job cannot name a tenant while the tenant mode is off'
        using errcode = '42501', hint = 'Leave tenant out; with the mode on, the engine sets it from your role.';
    end if;
    insert into pgrun.queues (name) values (q) on conflict do nothing;
    perform pg_notify('pgrun_jobs', q || ' ' || front);
  end loop;
  return null;
end;
$$;

select pgrun.ensure_ddl('trigger', 'jobs_after_insert', 'pgrun.jobs', $ddl$
create or replace trigger jobs_after_insert
  after insert on pgrun.jobs
  referencing new table as new_rows
  for each statement execute function pgrun.jobs_after_insert();
$ddl$);

-- replace_queued gives queued job id, if it still holds unique_key, new args, priority
-- and run_at (run_at NULL keeps it) and records job.replaced; it returns the job, or
-- NULL if it is no longer queued under that key (or, in the tenant mode, belongs to
-- another tenant). It is enqueue_job's on_conflict => 'replace': enqueue_job finds the
-- holder with the caller's privileges; this part runs as the engine, so it checks what
-- it writes by the enqueue rules (job_spec_fault: args an object within
-- max_json_bytes(), priority within bounds, run_at finite) and raises 22023 before
-- writing anything.
create or replace function pgrun.replace_queued(id bigint, unique_key text, args jsonb, priority integer, run_at timestamptz)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  j pgrun.jobs;
begin
  perform pgrun.check_job_spec(row(coalesce((select x.kind from pgrun.jobs x where x.id = replace_queued.id), 'job'),
                                   coalesce(args, '{}'), 'default', coalesce(priority, 0), run_at, null, unique_key,
                                   null, null, null, null, null, null, null, null,
                                   null, null, null, null)::pgrun.job_spec);
  update pgrun.jobs x
  set args = coalesce(replace_queued.args, '{}'), priority = coalesce(replace_queued.priority, 0),
      run_at = coalesce(replace_queued.run_at, x.run_at)
  where x.id = replace_queued.id and x.unique_key = replace_queued.unique_key and x.status = 'queued'
    and pgrun.may_touch(x.tenant)
  returning x.* into j;
  if found then
    perform pgrun.add_event(j.id, 'job.replaced', 'info', 'a duplicate enqueue replaced the args',
      jsonb_build_object('unique_key', j.unique_key));
  end if;
  return j;
end;
$$;

-- enqueue_job enqueues one job and returns it: enqueue_specs with one spec, whose
-- attributes it takes as parameters by name (kind is required; the rest default as in job_spec).
-- It runs with the caller's privileges (pgrun_enqueuer inserts its own fields; the
-- insert trigger refuses the rest). run_at NULL means now; max_attempts and timeout
-- NULL mean the queue's defaults (then 25 attempts and one hour); timeout 0 means none.
--
-- Deduplication by unique_key: while an active (pending, queued, running, waiting)
-- job holds the key, that job is returned and nothing is written; with unique_window,
-- so is one that finished within the window. With on_conflict => 'replace', a holder
-- that is still queued takes the new args, priority and run_at (event job.replaced)
-- instead; the default 'ignore' leaves it as it is. Keys are per tenant (one space
-- with the tenant mode off). Whether the job returned was deduplicated is
-- enqueue_specs' to say.
--
-- sequence_key makes the job one of a sequence: the jobs of one queue with one key run
-- one at a time, in id order (36_sequences.sql). debounce_key with debounce folds the
-- enqueues of one key within the window into one job: debounce_edge 'trailing' (the
-- default) into the job still waiting for its window to end, which takes the latest
-- args and meta and runs when the window (moved to now + debounce) ends; 'leading'
-- runs the first at once and returns it for the rest of its window, writing nothing.
-- With a unique_key too, the unique key is checked first (enqueue_debounced). The job
-- returned is the one folded into; enqueue_specs says whether it was (folded).
create or replace function pgrun.enqueue_job(
  kind             text,
  args             jsonb default '{}',
  queue            text default 'default',
  priority         integer default 0,
  run_at           timestamptz default null,
  max_attempts     integer default null,
  unique_key       text default null,
  parent_id        bigint default null,
  model            text default null,
  timeout          interval default null,
  meta             jsonb default '{}',
  concurrency_key  text default null,
  unique_window    interval default null,
  on_conflict      text default 'ignore',
  model_required   boolean default false,
  sequence_key     text default null,
  debounce_key     text default null,
  debounce         interval default null,
  debounce_edge    text default null
)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  j  pgrun.jobs;
begin
  -- enqueue_columns with arrays of one (enqueue_specs without unzipping a spec). A
  -- row of pgrun.enqueued is a row of pgrun.jobs and then deduplicated and folded,
  -- which the assignment leaves out. The parameters go by their qualified names.
  select * into j
  from pgrun.enqueue_columns(array[enqueue_job.kind], array[enqueue_job.args], array[enqueue_job.queue],
    array[enqueue_job.priority], array[enqueue_job.run_at], array[enqueue_job.max_attempts],
    array[enqueue_job.unique_key], array[enqueue_job.parent_id], array[enqueue_job.model],
    array[enqueue_job.timeout], array[enqueue_job.meta], array[enqueue_job.concurrency_key],
    array[enqueue_job.unique_window], array[enqueue_job.on_conflict], array[enqueue_job.model_required],
    array[enqueue_job.sequence_key], array[enqueue_job.debounce_key], array[enqueue_job.debounce],
    array[enqueue_job.debounce_edge]);
  return j;
end;
$$;
