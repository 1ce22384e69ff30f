package store

import "errors"

// ErrUnavailable reports that a shared store (etcd) cannot be reached, so a
// write was not applied anywhere. Callers answer 503 and never apply the
// change locally, so that gateways sharing the store never diverge.
var ErrUnavailable = errors.New("store unavailable")
