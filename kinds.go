package pgrun

import (
	"context"
	"reflect"

	"github.com/jackc/pgx/v5"
)

// JobArgs is implemented by args types that name their job kind, so that the kind
// string is written once, on the type, and both the enqueue and the handler take it
// from there:
//
//	type ResizeArgs struct{ Image string }
//
//	func (ResizeArgs) Kind() string { return "resize" }
//
//	job, err := client.EnqueueArgs(ctx, ResizeArgs{Image: "a.png"})
//
// It is optional: a kind can always be given as a string. Kind must not depend on the
// value (it is also called on a zero value, to learn a handler's kind).
type JobArgs interface {
	Kind() string
}

// KindOf returns the kind args names if its type implements [JobArgs] with a value
// or a pointer receiver (a nil pointer counts as its type's zero value), and false
// if it does not.
func KindOf(args any) (string, bool) {
	if args == nil {
		return "", false
	}
	if a, ok := args.(JobArgs); ok {
		v := reflect.ValueOf(args)
		if v.Kind() != reflect.Pointer || !v.IsNil() {
			return a.Kind(), true
		}
	}
	v := reflect.ValueOf(args)
	t := v.Type()
	if t.Kind() == reflect.Pointer {
		t = t.Elem() // a nil *T (or a non-nil one whose T has the method): ask a zero T
	}
	zero := reflect.New(t) // *T, pointing to a zero T
	if a, ok := zero.Elem().Interface().(JobArgs); ok {
		return a.Kind(), true
	}
	if a, ok := zero.Interface().(JobArgs); ok {
		if v.Kind() != reflect.Pointer {
			zero.Elem().Set(v) // the value itself, addressed
		}
		return a.Kind(), true
	}
	return "", false
}

// SpecFor is the spec [Client.EnqueueArgs] sends for args and opts: args' kind, args,
// and the options applied. Use it to build typed specs for [Client.EnqueueMany].
func SpecFor(args JobArgs, opts ...Option) JobSpec {
	kind, _ := KindOf(args)
	s := JobSpec{Kind: kind, Args: args}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// EnqueueArgs is [Client.Enqueue] with the kind taken from args.
func (c *Client) EnqueueArgs(ctx context.Context, args JobArgs, opts ...Option) (*Job, error) {
	return enqueueOne(ctx, c.pool, c.cfg.Queue, "", args, opts)
}

// EnqueueArgsTx is [Client.EnqueueTx] with the kind taken from args.
func (c *Client) EnqueueArgsTx(ctx context.Context, tx pgx.Tx, args JobArgs, opts ...Option) (*Job, error) {
	return enqueueOne(ctx, tx, c.cfg.Queue, "", args, opts)
}
