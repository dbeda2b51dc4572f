package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun/runner"
)

// OrderArgs are an order's job args.
type OrderArgs struct {
	Order       int64  `json:"order"`
	SKU         string `json:"sku"`
	Qty         int    `json:"qty"`
	AmountCents int64  `json:"amount_cents"`
	Email       string `json:"email"`
	// PayWithin is how long the order waits for its payment's confirmation, as a Go
	// duration ("1h0m0s").
	PayWithin string `json:"pay_within"`
}

// Kind is the job kind of an order.
func (OrderArgs) Kind() string { return "shop.order" }

// Validate refuses args no attempt could run: the job then fails at once.
func (a OrderArgs) Validate() error {
	switch d, err := time.ParseDuration(a.PayWithin); {
	case a.Order <= 0:
		return fmt.Errorf("order %d is not a positive integer", a.Order)
	case a.SKU == "" || a.Qty <= 0 || a.AmountCents <= 0:
		return fmt.Errorf("order %d: sku, qty and amount_cents are required, got %q, %d, %d", a.Order, a.SKU, a.Qty, a.AmountCents)
	case err != nil || d <= 0:
		return fmt.Errorf("order %d: pay_within %q is not a positive duration", a.Order, a.PayWithin)
	}
	return nil
}

// PaymentEvent is the event that confirms the order's payment: what the payment
// provider's webhook would emit (pgrun.emit_event), with payload {"ok": true} or
// {"ok": false, "reason": "..."}.
func (a OrderArgs) PaymentEvent() string { return fmt.Sprintf("payment:%d", a.Order) }

// Shop is what the order handler works with.
type Shop struct {
	Pool     *pgxpool.Pool
	Payments *PaymentAPI
	Mail     *Mailer
}

// Payment is the payload of a payment event.
type Payment struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

// PlaceOrder is the durable handler. Every time the job is claimed it runs from the
// top, and each durable call (runner.StepTx, Step, AwaitEvent) returns what it
// recorded the first time instead of doing it again. So a worker can die anywhere:
// the next one to claim the order skips what is done and carries on. The code between
// the calls runs again on every resume, so it only decides.
//
// Its recorded steps, in order: reserve, charge, payment:<order>, then receipt, or,
// if the payment was declined or not confirmed in time, void and release.
func (s *Shop) PlaceOrder(ctx context.Context, j *runner.Job[OrderArgs]) (any, error) {
	a := j.Args

	// 1. Reserve the stock: a write in this database, so StepTx records the step in
	// the same transaction: the reservation and its record commit together, once.
	if err := s.stepTx(ctx, j, "reserve", func(ctx context.Context, tx pgx.Tx) error {
		return reserve(ctx, tx, a)
	}); err != nil {
		return nil, err
	}

	// 2. Charge the card: an API outside the database. Step records the charge once the
	// call has returned; a worker that dies during the call (before the record) makes
	// it again on the next attempt, so the call carries an idempotency key, and the
	// provider answers a key it has seen with the first charge.
	charge, err := runner.Step(ctx, j, "charge", func(ctx context.Context) (Charge, error) {
		return s.Payments.Charge(ctx, fmt.Sprintf("order-%d", a.Order), a.Order, a.AmountCents)
	})
	if err != nil {
		return nil, err
	}

	// 3. Wait for the provider to confirm the payment. The job parks: it holds no
	// worker slot and spends no attempt while it waits, and any worker resumes it
	// when the event comes, or when the time runs out.
	var pay Payment
	raw, err := runner.AwaitEvent(ctx, j, a.PaymentEvent(), a.payWithin())
	switch {
	case errors.Is(err, runner.ErrEventTimeout):
		pay.Reason = fmt.Sprintf("the payment was not confirmed within %s", a.PayWithin)
	case err != nil:
		return nil, err // runner.ErrParked among them: return it as it is
	default:
		if err := json.Unmarshal(raw, &pay); err != nil || (!pay.OK && pay.Reason == "") {
			pay = Payment{Reason: fmt.Sprintf("the payment event did not say {\"ok\": true}: %s", raw)}
		}
	}
	if !pay.OK {
		return nil, s.cancel(ctx, j, charge, pay.Reason)
	}

	// 4. Send the receipt: outside the database again, recorded once sent.
	receipt, err := runner.Step(ctx, j, "receipt", func(ctx context.Context) (string, error) {
		return s.Mail.SendReceipt(ctx, a.Email, a.Order, charge)
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"order": a.Order, "charge": charge.ID, "receipt": receipt}, nil
}

// cancel undoes an order whose payment did not go through: it voids the charge and
// puts the stock back, each once, and fails the job for good with reason.
func (s *Shop) cancel(ctx context.Context, j *runner.Job[OrderArgs], charge Charge, reason string) error {
	if _, err := runner.Step(ctx, j, "void", func(ctx context.Context) (bool, error) {
		return true, s.Payments.Void(ctx, charge.ID)
	}); err != nil {
		return err
	}
	if err := s.stepTx(ctx, j, "release", func(ctx context.Context, tx pgx.Tx) error {
		return release(ctx, tx, j.Args)
	}); err != nil {
		return err
	}
	return runner.Permanent(fmt.Errorf("order %d cancelled: %s", j.Args.Order, reason))
}

// stepTx runs fn as step name (runner.StepTx) in a transaction of its own, and
// commits it at once: StepTx's record locks the job's row until the transaction
// ends, so nothing else that touches the job (its next durable call, j.Emit, the
// runner's lease renewal) gets through before the commit.
func (s *Shop) stepTx(ctx context.Context, j *runner.Job[OrderArgs], name string, fn func(context.Context, pgx.Tx) error) error {
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := runner.StepTx(ctx, j, tx, name, func(ctx context.Context, tx pgx.Tx) (bool, error) {
		return true, fn(ctx, tx)
	}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (a OrderArgs) payWithin() time.Duration {
	d, _ := time.ParseDuration(a.PayWithin) // Validate checked it
	return d
}
