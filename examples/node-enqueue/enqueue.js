// Enqueue pgrun jobs from Node with `pg`, inside the caller's own transaction: the
// order row and its job commit together, or neither does (and no runner is woken
// for a job that was rolled back: the wake-up is sent at commit).
//
//   node enqueue.js "$DATABASE_URL"          # enqueues one order and its job, prints the job's id
//   node enqueue.js "$DATABASE_URL" --fail   # the same, rolled back: nothing is enqueued
import pg from 'pg';

const [url, flag] = process.argv.slice(2);
const client = new pg.Client({ connectionString: url });
await client.connect();
await client.query('create table if not exists orders (id bigserial primary key, item text not null)');
try {
  await client.query('begin');
  // The service's own write ...
  const order = await client.query('insert into orders (item) values ($1) returning id', ['book']);
  const id = Number(order.rows[0].id); // pg returns bigint as a string
  // ... and the job, in the same transaction. Named arguments keep the call valid as the
  // SQL API appends parameters (docs/upgrading.md).
  const job = await client.query(
    'select id from pgrun.enqueue_job($1, $2::jsonb, queue => $3, unique_key => $4)',
    ['echo', JSON.stringify({ order: id }), 'orders', `order-${id}`]);
  if (flag === '--fail') throw new Error('payment declined');
  await client.query('commit');
  console.log(job.rows[0].id);
} catch (err) {
  await client.query('rollback');
  console.error(`rolled back: ${err.message}`);
  process.exitCode = 1;
} finally {
  await client.end();
}
