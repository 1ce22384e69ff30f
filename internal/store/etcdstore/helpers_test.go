package etcdstore

import (
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
	"github.com/graygate/graygate/internal/store/storetest"
)

// newClock returns a clock that advances one second per call, so that every
// change has a distinct, predictable time (as in the conformance suite).
var newClock = storetest.Clock

// at is the time the n-th call of a newClock clock returns.
var at = storetest.At

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// testLogger discards, unless GRAYGATE_TEST_LOG=1 asks for the store's logs
// on stderr.
func testLogger() *slog.Logger {
	if os.Getenv("GRAYGATE_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// fastOptions are Options that notice an outage within about half a second
// and reconnect quickly, with a ticking test clock. DialTimeout and
// WriteTimeout stay long, because on a loaded machine a fresh server's
// first read, or an fsync behind a write, can take seconds; the tests that
// measure how fast calls fail during an outage shorten them.
func fastOptions() Options {
	return Options{
		Now:           newClock(),
		DialTimeout:   5 * time.Second,
		WriteTimeout:  5 * time.Second,
		ProbeInterval: 150 * time.Millisecond,
		ProbeTimeout:  300 * time.Millisecond,
		MaxBackoff:    300 * time.Millisecond,
		Logger:        testLogger(),
	}
}

// prefixOf turns a test name into a prefix of its own, so that subtests
// can share one server.
func prefixOf(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, t.Name())
	return "/test/" + name
}

// openStore opens a store on prefix, closed when t ends.
func openStore(t testing.TB, srv *etcdtest.Server, prefix string, opts Options) *Store {
	t.Helper()
	cfg, err := ParseURL(srv.URL(prefix))
	if err != nil {
		t.Fatalf("ParseURL(%q) = %v", srv.URL(prefix), err)
	}
	s, err := Open(t.Context(), cfg, opts)
	if err != nil {
		t.Fatalf("Open(%s) = %v", srv.URL(prefix), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// eventually polls cond every 20ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nextChange waits for a notification on ch.
var nextChange = storetest.NextChange
