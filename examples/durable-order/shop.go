package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun/runner"
)

// The example's own tables, in schema durable_order: the shop's stock, orders and
// reservations, and the fake payment provider's ledger of charges (a real provider's
// is not in your database; this one is, so that you can count the charges).
const schema = `
create schema if not exists durable_order;
create table if not exists durable_order.stock (
  sku        text primary key,
  available  integer not null check (available >= 0)
);
insert into durable_order.stock (sku, available) values ('widget', 100) on conflict do nothing;
create table if not exists durable_order.orders (
  id            bigint primary key,
  sku           text not null,
  qty           integer not null,
  amount_cents  bigint not null,
  job_id        bigint not null,
  placed_at     timestamptz not null default now()
);
create table if not exists durable_order.reservations (
  order_id     bigint primary key references durable_order.orders,
  sku          text not null,
  qty          integer not null,
  reserved_at  timestamptz not null default now()
);
create table if not exists durable_order.charges (
  id               text primary key,
  idempotency_key  text not null unique,
  order_id         bigint not null,
  amount_cents     bigint not null,
  requests         integer not null default 1,
  charged_at       timestamptz not null default now(),
  voided_at        timestamptz
);`

// createTables creates the example's tables if they are missing, one process at a
// time (two commands started at once would race on CREATE ... IF NOT EXISTS).
func createTables(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('durable_order.schema'))`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create the example's tables: %w", err)
	}
	return tx.Commit(ctx)
}

// recordOrder records order a as placed by job, in tx, and returns the job that
// placed it: job, or an earlier one if the order exists already.
func recordOrder(ctx context.Context, tx pgx.Tx, a OrderArgs, job int64) (int64, error) {
	var placed int64
	err := tx.QueryRow(ctx, `
		with added as (
		  insert into durable_order.orders (id, sku, qty, amount_cents, job_id) values ($1, $2, $3, $4, $5)
		  on conflict (id) do nothing
		  returning job_id)
		select job_id from added
		union all
		select job_id from durable_order.orders where id = $1`,
		a.Order, a.SKU, a.Qty, a.AmountCents, job).Scan(&placed)
	if err != nil {
		return 0, fmt.Errorf("record order %d: %w", a.Order, err)
	}
	return placed, nil
}

// orderJob returns the job that placed order.
func orderJob(ctx context.Context, pool *pgxpool.Pool, order int64) (int64, error) {
	var id int64
	err := pool.QueryRow(ctx, `select job_id from durable_order.orders where id = $1`, order).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("there is no order %d: place it with `enqueue %d`", order, order)
	}
	return id, err
}

// errOutOfStock fails an order for good: no retry brings the stock back.
var errOutOfStock = errors.New("out of stock")

// reserve takes the order's items out of stock, in tx.
func reserve(ctx context.Context, tx pgx.Tx, a OrderArgs) error {
	tag, err := tx.Exec(ctx, `update durable_order.stock set available = available - $2 where sku = $1 and available >= $2`, a.SKU, a.Qty)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return runner.Permanent(fmt.Errorf("order %d: %d × %s: %w", a.Order, a.Qty, a.SKU, errOutOfStock))
	}
	_, err = tx.Exec(ctx, `insert into durable_order.reservations (order_id, sku, qty) values ($1, $2, $3)`, a.Order, a.SKU, a.Qty)
	return err
}

// release puts a cancelled order's items back, in tx.
func release(ctx context.Context, tx pgx.Tx, a OrderArgs) error {
	tag, err := tx.Exec(ctx, `delete from durable_order.reservations where order_id = $1`, a.Order)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	_, err = tx.Exec(ctx, `update durable_order.stock set available = available + $2 where sku = $1`, a.SKU, a.Qty)
	return err
}

// Charge is what the payment provider answers a charge with.
type Charge struct {
	ID          string `json:"id"`
	AmountCents int64  `json:"amount_cents"`
}

// PaymentAPI stands in for a card processor across the network. Charge takes an
// idempotency key, as real processors' APIs do: a charge under a key the provider
// has seen returns the first charge instead of charging again. Every call is logged
// ("charging order ..."), so that you can see how often the handler made it.
type PaymentAPI struct {
	Pool *pgxpool.Pool // the provider's ledger (durable_order.charges)
	Log  *log.Logger
}

// Charge charges amount cents for order under idempotency key.
func (p *PaymentAPI) Charge(ctx context.Context, key string, order, cents int64) (Charge, error) {
	p.Log.Printf("charging order %d: $%d.%02d (idempotency key %s)", order, cents/100, cents%100, key)
	c := Charge{ID: "ch_" + randomHex(8)}
	err := p.Pool.QueryRow(ctx, `
		insert into durable_order.charges (id, idempotency_key, order_id, amount_cents) values ($1, $2, $3, $4)
		on conflict (idempotency_key) do update set requests = durable_order.charges.requests + 1
		returning id, amount_cents`, c.ID, key, order, cents).Scan(&c.ID, &c.AmountCents)
	if err != nil {
		return Charge{}, fmt.Errorf("charge order %d: %w", order, err)
	}
	return c, nil
}

// Void cancels charge id.
func (p *PaymentAPI) Void(ctx context.Context, id string) error {
	p.Log.Printf("voiding charge %s", id)
	_, err := p.Pool.Exec(ctx, `update durable_order.charges set voided_at = coalesce(voided_at, now()) where id = $1`, id)
	return err
}

// Mailer stands in for an e-mail service.
type Mailer struct {
	Log *log.Logger
}

// SendReceipt mails the receipt of order, paid by charge, to addr and returns the
// message's id.
func (m *Mailer) SendReceipt(_ context.Context, addr string, order int64, charge Charge) (string, error) {
	id := "msg_" + randomHex(8)
	m.Log.Printf("sending receipt for order %d to %s (charge %s, message %s)", order, addr, charge.ID, id)
	return id, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
