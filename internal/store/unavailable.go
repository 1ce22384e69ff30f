package store

import "errors"

// ErrUnavailable reports that a shared store (etcd) cannot be reached, so a
// write was not applied anywhere. Callers answer 503 and never apply the
// change locally, so that gateways sharing the store never diverge.
var ErrUnavailable = errors.New("store unavailable")

// ErrUnconfirmed reports a write that a shared store (etcd) was sent but
// did not confirm (no answer in time, the connection lost after sending):
// it may or may not have been applied. Errors that wrap it wrap
// ErrUnavailable too, so that a caller that only knows that one still
// answers 503; one that knows this one tells the client to read the rule
// back before retrying, rather than that nothing changed.
var ErrUnconfirmed = errors.New("write not confirmed")

// Unconfirmed marks err, a failed write that was sent, as ErrUnconfirmed;
// its message is err's.
func Unconfirmed(err error) error { return unconfirmed{err} }

type unconfirmed struct{ err error }

func (u unconfirmed) Error() string   { return u.err.Error() }
func (u unconfirmed) Unwrap() []error { return []error{u.err, ErrUnconfirmed} }
