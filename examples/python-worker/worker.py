#!/usr/bin/python3
"""A pgrun worker in plain Python (psycopg 3): worker.py DATABASE_URL QUEUE. It uses the
SQL API alone (docs/sql-api.md#write-a-worker-in-your-language): whether a failure is
retried, when, and what a lost lease means are the database's rules, not this file's.
With PGRUN_BATCH=N it runs in batch mode (README.md): up to N jobs claimed together,
one handler call for all of them, each job reported on its own."""
import os, select, signal, socket, sys, threading, time
from datetime import datetime, timedelta, timezone
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
URL, QUEUE = sys.argv[1], sys.argv[2]
WORKER = os.environ.get("PGRUN_WORKER_ID") or f"py:{socket.gethostname()}:{os.getpid()}"
BATCH = int(os.environ.get("PGRUN_BATCH") or 0)  # batch mode: up to BATCH jobs a handler call (1 to 1000)
LINGER = int(os.environ.get("PGRUN_BATCH_LINGER_MS") or 50) / 1000  # how long a batch waits to fill (0 to 10000 ms)
if not 0 <= BATCH <= 1000 or not 0 <= LINGER <= 10: sys.exit(f"PGRUN_BATCH {BATCH} (0 to 1000) or PGRUN_BATCH_LINGER_MS is out of bounds")
# Batch mode serves the kinds that run at once: its jobs wait for each other, and a
# durable step is one job's code resumed on its own (as runner.HandleBatch does).
KINDS = ["noop", "echo", "fail", "later", "fanout"] if BATCH else ["noop", "echo", "sleep", "fail", "later", "fanout",
         "durable_steps", "durable_flaky", "durable_sleep", "durable_event", "durable_spawn", "durable_mismatch"]
stop, cancelled, lock = threading.Event(), threading.Event(), threading.Lock()
current = []        # the jobs being run: [(id, claim_id)], read by the keeper thread
lost = set()        # batch mode: ids of current jobs no longer ours (cancelled, timed out, taken back)
renew_every = 10.0  # a third of the claims' shortest lease (lease_length)

class Permanent(Exception): pass  # reported with retryable => false
class Later(Exception): pass      # put back without spending an attempt
class Defer(Exception): pass      # wait for children, then succeed (fan-in in SQL)
class Parked(Exception): pass     # the database ended the attempt (parked, step mismatch, stale claim)

# Durable execution (sql/functions/35_durable.sql): each helper is one call of the SQL
# API under the claim. The calls of an attempt are numbered from 0 in the order made;
# a status other than done, none or timeout means the database has decided: stop.
def call(conn, job, fn, name, pos, *args):
    marks = ", ".join(["%s"] * (len(args) + 5))
    status, *value = conn.execute(f"select * from pgrun.{fn}({marks})",
                                  (job["id"], name, pos, *args, WORKER, job["claim_id"])).fetchone().values()
    if status in ("parked", "mismatch", "stale"): raise Parked(status)
    return status, (value or [None])[0]
def position(job):
    job["calls"] = job.get("calls", 0) + 1
    return job["calls"] - 1
def step(conn, job, name, fn):  # fn() runs until one attempt records its result
    pos = position(job)
    status, result = call(conn, job, "step_get", name, pos)
    if status == "done": return result
    result = fn()
    call(conn, job, "step_put", name, pos, Jsonb(result))
    return result
def sleep(conn, job, name, ms):  # parks the job until the time, once
    call(conn, job, "sleep_job", name, position(job), datetime.now(timezone.utc) + timedelta(milliseconds=ms))
def wait_arg(ms): return timedelta(milliseconds=ms) if ms > 0 else None  # None: the longest wait
def await_event(conn, job, event, timeout_ms=0):  # the payload, or TimeoutError
    status, payload = call(conn, job, "await_event", event, position(job), event, wait_arg(timeout_ms))
    if status == "timeout": raise TimeoutError(f"event {event}")
    return payload
def spawn(conn, job, name, spec):  # enqueues spec once across attempts; returns its id
    return call(conn, job, "spawn_job", name, position(job), Jsonb(spec))[1]
def await_job(conn, job, awaited, timeout_ms=0):  # its {id, status, result, error}, or TimeoutError
    status, outcome = call(conn, job, "await_job", f"job:{awaited}", position(job), awaited, wait_arg(timeout_ms))
    if status == "timeout": raise TimeoutError(f"job {awaited}")
    return outcome

def ran(conn, job, name):
    """The durable examples' step body: says so (step.ran) and returns the attempt."""
    fields = {"step": name, "worker": WORKER, "claim_id": str(job["claim_id"]), "attempt": job["attempt"]}
    conn.execute("select pgrun.emit(%s, 'step.ran', %s, worker => %s, claim_id => %s)", (job["id"], Jsonb(fields), WORKER, job["claim_id"]))
    return {"attempt": job["attempt"]}

def flaky(conn, job):  # durable_flaky's second step
    ran(conn, job, "flaky")
    if job["attempt"] == 1: raise RuntimeError("durable_flaky: the flaky step fails on the first attempt")
    return {"attempt": job["attempt"]}

def handle(conn, job):
    kind, args = job["kind"], job["args"]
    if kind == "echo": return args
    if kind == "sleep":  # ends early, with an error, if cancelled
        if cancelled.wait(args.get("ms", 0) / 1000): raise InterruptedError("cancelled")
        return {"slept_ms": args.get("ms", 0)}
    if kind == "fail":
        if 0 < args.get("times", 0) <= job["failures"]: return {"failed_before": job["failures"]}
        msg = args.get("message") or "fail job failed as asked"
        raise Permanent(msg) if args.get("permanent") else RuntimeError(msg)
    if kind == "later":
        if job["attempt"] == 1: raise Later(max(args.get("ms", 10), 10) / 1000)
        return {"attempt": job["attempt"]}
    if kind == "fanout":
        raise Defer([{"kind": "noop", "queue": job["queue"]}] * (args.get("children") or 2))
    if kind == "durable_steps":  # as runner/examples.go's durable kinds
        one = step(conn, job, "one", lambda: ran(conn, job, "one"))
        if job["attempt"] == 1 and cancelled.wait(args.get("pause_ms", 0) / 1000): raise InterruptedError("cancelled")
        return {"one": one, "two": step(conn, job, "two", lambda: ran(conn, job, "two"))}
    if kind == "durable_flaky":
        before = step(conn, job, "before", lambda: ran(conn, job, "before"))
        return {"before": before, "flaky": step(conn, job, "flaky", lambda: flaky(conn, job))}
    if kind == "durable_sleep":
        if args.get("ms", 0) < 0: raise Permanent(f"durable_sleep: ms {args['ms']} is negative")
        sleep(conn, job, "nap", args.get("ms", 0))
        return {"slept_ms": args.get("ms", 0)}
    if kind == "durable_event":
        try: return await_event(conn, job, args["event"], args.get("timeout_ms", 0))
        except TimeoutError: return {"timeout": True}
    if kind == "durable_spawn":
        child = spawn(conn, job, "child", {"kind": "noop", "queue": job["queue"]})
        if job["attempt"] == 1: raise RuntimeError("durable_spawn: the first attempt fails after the spawn")
        return {"child": child, "status": await_job(conn, job, child)["status"]}
    if kind == "durable_mismatch":
        first = "a" if job["attempt"] == 1 else "b"
        step(conn, job, first, lambda: ran(conn, job, first))
        raise RuntimeError(f"durable_mismatch: fails after step {first}")
    return None  # noop

def complete(conn, job, result):
    """Records a success. The success of a job of a sequence hands this worker the next
    job of its sequence where a claim would have (docs/operations.md, "The handoff"):
    returned, claimed already, to run next; None otherwise."""
    args = (job["id"], job["attempt"], Jsonb(result) if result is not None else None, WORKER, job["claim_id"])
    if job.get("sequence_key") is None:
        conn.execute("select pgrun.complete_job(%s, %s, %s, %s, %s)", args)
        return None
    with conn.transaction():  # pgrun.handed lives as long as the transaction
        conn.execute("select pgrun.complete_jobs(array[%s]::bigint[], array[%s]::int[], array[%s]::jsonb[], %s, "
                     "array[%s]::uuid[], hand_over => array[%s]::bigint[])", (*args, job["id"]))
        return conn.execute("select * from pgrun.handed_jobs(%s)", (WORKER,)).fetchone()

def report(conn, job, result, err):
    """Reports the outcome; returns the job handed over to run next, if any (complete)."""
    key, claim = (job["id"], job["attempt"]), job["claim_id"]  # the claim token: reports match only this claim
    if err is None:
        return complete(conn, job, result)
    elif isinstance(err, Parked):
        pass  # parked, failed for a step mismatch, or no longer ours: the database has decided
    elif stop.is_set() and cancelled.is_set():  # shutting down: back to the queue, no attempt spent
        conn.execute("select pgrun.requeue_job(%s, %s, 'worker shut down', %s, %s)", (*key, WORKER, claim))
    elif cancelled.is_set():
        pass  # cancelled, timed out or taken back: the database has decided already
    elif isinstance(err, Later):
        conn.execute("select pgrun.retry_later(%s, %s, make_interval(secs => %s), 'later', %s, %s)", (*key, err.args[0], WORKER, claim))
    elif isinstance(err, Defer):
        conn.execute("select pgrun.defer_job(%s, %s, %s, 1.0, %s, %s)", (*key, Jsonb(err.args[0]), WORKER, claim))
    else:  # the class decides retryability in SQL (pgrun.error_class_permanent)
        conn.execute("select pgrun.fail_job(%s, %s, %s, %s, %s, %s)", (*key, Jsonb({"class": "error", "message": str(err)}),
                     False if isinstance(err, Permanent) else None, WORKER, claim))
    return None

def wait(conn, timeout):
    """Waits up to timeout for a notification on conn and returns the payloads."""
    if select.select([conn.fileno()], [], [], timeout)[0]: conn.pgconn.consume_input()
    out = []
    while (n := conn.pgconn.notifies()) is not None: out.append(n.extra.decode())
    return out

def interrupt(jobs, gone=()):
    """Ends the running job's handler early, unless the main loop has moved on from it
    already. A batch's handler runs on for its other jobs: the ids in gone are only
    marked lost, and are not reported."""
    with lock:
        if not set(jobs) & set(current): return
        if BATCH: lost.update(gone)
        else: cancelled.set()

def keeper():
    """Renews the running job's lease every third of it and heartbeats; a cancel
    notification is only a hint, confirmed by a renewal that no longer holds the job.
    It also interrupts the running job once SIGTERM has set stop: the signal handler
    itself only sets stop, because a handler that takes a lock the main thread may be
    holding at that instant (every threading.Event has one) deadlocks the worker."""
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute("listen pgrun_cancel")
        last = 0.0
        while not stop.is_set() or current:
            notes = wait(conn, 0.2)
            with lock: held, every = list(current), renew_every
            if held and stop.is_set(): interrupt(held)
            hinted = any(p.split(":")[0] == str(h[0]) for p in notes for h in held)
            if time.monotonic() - last < every and not hinted: continue
            last = time.monotonic()
            if held:
                kept = {r[0] for r in conn.execute("select pgrun.renew_leases(%s, %s::bigint[], null, %s::uuid[])",
                                                   (WORKER, [h[0] for h in held], [h[1] for h in held]))}
                if gone := [h for h in held if h[0] not in kept]: interrupt(gone, [h[0] for h in gone])
            conn.execute("select pgrun.worker_heartbeat(%s, %s, %s, %s, cadence => make_interval(secs => %s), kinds => %s)",
                         (WORKER, socket.gethostname(), os.getpid(), [QUEUE], every, KINDS))

def hold(jobs):
    """Makes jobs the ones the keeper renews."""
    global current, renew_every
    with lock:
        current = [(j["id"], j["claim_id"]) for j in jobs]
        renew_every = min(j["lease_length"].total_seconds() for j in jobs) / 3 if jobs else renew_every

def claim_batch(conn):
    """Claims up to BATCH jobs, then claims more as notifications come, for at most
    LINGER after the first arrived, until the batch is full."""
    claim = "select * from pgrun.claim_jobs(%s, %s, %s, kinds => %s)"
    jobs = conn.execute(claim, (QUEUE, WORKER, BATCH, KINDS)).fetchall()
    deadline = time.monotonic() + LINGER
    while jobs and len(jobs) < BATCH and not stop.is_set() and (left := deadline - time.monotonic()) > 0:
        hold(jobs)  # renewed while the batch fills
        if wait(conn, left): jobs += conn.execute(claim, (QUEUE, WORKER, BATCH - len(jobs), KINDS)).fetchall()
    return jobs

def handle_batch(conn, jobs):
    """The batch handler: one call for the jobs claimed together, which returns one
    (result, error) per job, in order. Here it runs the example kinds one by one; a
    real one makes one call for all (a model's forward pass over every job's input)."""
    out = []
    for job in jobs:
        try: out.append((handle(conn, job), None))
        except Exception as e: out.append((None, e))
    return out

def report_batch(conn, jobs, outcomes):
    """Reports each job of a batch on its own: the successes in one complete_jobs call,
    each failure as report() does; nothing for a job that is no longer ours."""
    with lock: gone = set(lost)
    done = [(j, r) for j, (r, e) in zip(jobs, outcomes) if e is None and j["id"] not in gone]
    if done:
        results = [Jsonb(r) if r is not None else None for _, r in done]
        conn.execute("select pgrun.complete_jobs(%s::bigint[], %s::int[], %s::jsonb[], %s, %s::uuid[])",
                     ([j["id"] for j, _ in done], [j["attempt"] for j, _ in done],
                      results if any(r is not None for r in results) else None, WORKER, [j["claim_id"] for j, _ in done]))
    for j, (_, e) in zip(jobs, outcomes):
        if e is not None and j["id"] not in gone: report(conn, j, None, e)

def main():
    global current
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # nothing else: see keeper
    threading.Thread(target=keeper, daemon=True).start()
    with psycopg.connect(URL, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("listen pgrun_jobs")  # then register: the id is this login's from now on
        conn.execute("select pgrun.worker_heartbeat(%s, %s, %s, %s, kinds => %s)", (WORKER, socket.gethostname(), os.getpid(), [QUEUE], KINDS))
        handed = None  # a job of a sequence its predecessor's completion handed over
        while True:
            cancelled.clear()  # before the check: a SIGTERM after it interrupts the next job
            if stop.is_set():
                if handed: conn.execute("select pgrun.requeue_job(%s, %s, 'worker shut down', %s, %s)",
                                        (handed["id"], handed["attempt"], WORKER, handed["claim_id"]))
                break
            if BATCH:
                jobs = claim_batch(conn)
                if not jobs:
                    wait(conn, 1.0)
                    continue
                hold(jobs)
                report_batch(conn, jobs, handle_batch(conn, jobs))
                with lock: current = []; lost.clear()
                continue
            job, handed = handed or conn.execute("select * from pgrun.claim_job(%s, %s, %s)", (QUEUE, WORKER, KINDS)).fetchone(), None
            if job is None:
                wait(conn, 1.0)  # a notification, or poll each second
                continue
            hold([job])
            try: result, err = handle(conn, job), None
            except Exception as e: result, err = None, e
            handed = report(conn, job, result, err)
            with lock: current = []
        conn.execute("select pgrun.worker_heartbeat(%s, %s, %s, %s, state => 'stopped')",
                     (WORKER, socket.gethostname(), os.getpid(), [QUEUE]))

main()
