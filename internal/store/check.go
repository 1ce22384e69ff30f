package store

import "context"

// Check judges the state a write leads to before the write commits: base is
// the whole state the write lands on and next is base with the write
// applied (the written entry with its new version and revision). An error
// refuses the write, which then fails with that error as it is and changes
// nothing.
type Check func(base, next State) error

type checkKey struct{}

// WithCheck returns a context that carries check to the writes made with it
// (Put, Delete and SetRollback).
//
// A store that several processes write (etcdstore) runs the check on the
// state the write commits on top of, inside its compare-and-set, and again
// each time the write is retried after losing a race: a check that a
// process made beforehand against its own copy of the rules, which may lag
// behind another process's write, cannot let two writes that are each fine
// alone commit together. The file store, written by one process whose
// callers check against its current state under their own lock, does not
// run it.
//
// The check travels in the context because the write is made by whoever
// holds the store (the admin API), while what the state must satisfy is
// known to the gateway that commits it.
func WithCheck(ctx context.Context, check Check) context.Context {
	return context.WithValue(ctx, checkKey{}, check)
}

// CheckFrom returns the check ctx carries, or nil.
func CheckFrom(ctx context.Context) Check {
	c, _ := ctx.Value(checkKey{}).(Check)
	return c
}
