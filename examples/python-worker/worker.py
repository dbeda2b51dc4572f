#!/usr/bin/python3
"""A pgrun worker in plain Python (psycopg 3): worker.py DATABASE_URL QUEUE. It uses the
SQL API alone (docs/sql-api.md#write-a-worker-in-your-language): whether a failure is
retried, when, and what a lost lease means are the database's rules, not this file's."""
import os, select, signal, socket, sys, threading, time
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
URL, QUEUE = sys.argv[1], sys.argv[2]
WORKER = os.environ.get("PGRUN_WORKER_ID") or f"py:{socket.gethostname()}:{os.getpid()}"
KINDS = ["noop", "echo", "sleep", "fail", "later", "fanout"]
stop, cancelled, lock = threading.Event(), threading.Event(), threading.Lock()
current = None      # the job being run: (id, claim_id), read by the keeper thread
renew_every = 10.0  # a third of the claim's lease (lease_length)

class Permanent(Exception): pass  # reported with retryable => false
class Later(Exception): pass      # put back without spending an attempt
class Defer(Exception): pass      # wait for children, then succeed (fan-in in SQL)
def handle(job):
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
    return None  # noop

def report(conn, job, result, err):
    key, claim = (job["id"], job["attempt"]), job["claim_id"]  # the claim token: reports match only this claim
    if err is None:
        conn.execute("select pgrun.complete_job(%s, %s, %s, %s, %s)", (*key, Jsonb(result) if result is not None else None, WORKER, claim))
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

def wait(conn, timeout):
    """Waits up to timeout for a notification on conn and returns the payloads."""
    if select.select([conn.fileno()], [], [], timeout)[0]: conn.pgconn.consume_input()
    out = []
    while (n := conn.pgconn.notifies()) is not None: out.append(n.extra.decode())
    return out

def interrupt(job):
    """Ends job's handler early, unless the main loop has moved on from job already."""
    with lock:
        if current == job: cancelled.set()

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
            with lock: job, every = current, renew_every
            if job and stop.is_set(): interrupt(job)
            hinted = job and any(p.split(":")[0] == str(job[0]) for p in notes)
            if time.monotonic() - last < every and not hinted: continue
            last = time.monotonic()
            if job and not conn.execute("select pgrun.renew_leases(%s, %s, null, %s)", (WORKER, [job[0]], [job[1]])).fetchall():
                interrupt(job)
            conn.execute("select pgrun.worker_heartbeat(%s, %s, %s, %s, cadence => make_interval(secs => %s), kinds => %s)",
                         (WORKER, socket.gethostname(), os.getpid(), [QUEUE], every, KINDS))

def main():
    global current, renew_every
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # nothing else: see keeper
    threading.Thread(target=keeper, daemon=True).start()
    with psycopg.connect(URL, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("listen pgrun_jobs")  # then register: the id is this login's from now on
        conn.execute("select pgrun.worker_heartbeat(%s, %s, %s, %s, kinds => %s)", (WORKER, socket.gethostname(), os.getpid(), [QUEUE], KINDS))
        while True:
            cancelled.clear()  # before the check: a SIGTERM after it interrupts the next job
            if stop.is_set(): break
            job = conn.execute("select * from pgrun.claim_job(%s, %s, %s)", (QUEUE, WORKER, KINDS)).fetchone()
            if job is None:
                wait(conn, 1.0)  # a notification, or poll each second
                continue
            with lock:
                current = (job["id"], job["claim_id"])
                renew_every = job["lease_length"].total_seconds() / 3
            try: result, err = handle(job), None
            except Exception as e: result, err = None, e
            report(conn, job, result, err)
            with lock: current = None
        conn.execute("select pgrun.worker_heartbeat(%s, %s, %s, %s, state => 'stopped')",
                     (WORKER, socket.gethostname(), os.getpid(), [QUEUE]))

main()
