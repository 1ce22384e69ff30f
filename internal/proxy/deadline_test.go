package proxy

import (
	"net"
	"testing"
	"time"
)

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

func TestArmHeaderDeadline(t *testing.T) {
	start := time.Now()
	tests := []struct {
		name    string
		plain   bool          // a plain TCP connection (its deadline is tracked)
		armed   time.Duration // its deadline relative to start; 0 = none
		timeout time.Duration
		want    time.Duration // the deadline set, relative to start; 0 = kept
	}{
		{"TLS connection: always set", false, 0, time.Second, watchDelay},
		{"unknown deadline: set", true, 0, time.Second, watchDelay},
		{"armed within the window: kept", true, watchDelay * 3 / 4, time.Second, 0},
		{"armed at the window's start: kept", true, watchDelay / 2, time.Second, 0},
		{"armed at start+watchDelay: kept", true, watchDelay, time.Second, 0},
		{"armed too soon: set", true, watchDelay/2 - time.Millisecond, time.Second, watchDelay},
		{"expired: set", true, -time.Second, time.Second, watchDelay},
		{"armed too late: set", true, watchDelay + time.Millisecond, time.Second, watchDelay},
		{"timeout within watchDelay: exact, never kept", true, watchDelay * 3 / 4, watchDelay / 2, watchDelay / 2},
		{"timeout equal to watchDelay: exact", true, watchDelay, watchDelay, watchDelay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &deadlineConn{}
			var up *upstreamTCP
			if tt.plain {
				up = &upstreamTCP{}
				if tt.armed != 0 {
					up.rdl.Store(start.Add(tt.armed).UnixNano())
				}
			}
			if err := armHeaderDeadline(c, up, start, tt.timeout); err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.want == 0 && len(c.set) != 0:
				t.Fatalf("set %v, want the armed deadline kept", c.set[0].Sub(start))
			case tt.want != 0 && (len(c.set) != 1 || !c.set[0].Equal(start.Add(tt.want))):
				t.Fatalf("set %v, want one deadline at start+%v", c.set, tt.want)
			}
		})
	}
}

// TestUpstreamDeadlinesAreRecorded: whoever sets a deadline on an upstream
// connection, what armHeaderDeadline and keepUpstreamWriteDeadline read is
// the deadline it has.
func TestUpstreamDeadlinesAreRecorded(t *testing.T) {
	up := loopbackUpstream(t)
	r, w := time.Now().Add(time.Second), time.Now().Add(2*time.Second)
	_ = up.SetReadDeadline(r)
	_ = up.SetWriteDeadline(w)
	if up.rdl.Load() != r.UnixNano() || up.wdl.Load() != w.UnixNano() {
		t.Errorf("recorded %d/%d, set %d/%d", up.rdl.Load(), up.wdl.Load(), r.UnixNano(), w.UnixNano())
	}
	_ = up.SetDeadline(time.Time{})
	if up.rdl.Load() != 0 || up.wdl.Load() != 0 {
		t.Errorf("after SetDeadline(zero) recorded %d/%d", up.rdl.Load(), up.wdl.Load())
	}
	start := time.Now()
	if err := armHeaderDeadline(up, up, start, time.Second); err != nil || up.rdl.Load() != start.Add(watchDelay).UnixNano() {
		t.Errorf("armHeaderDeadline recorded %v, want start+%v (%v)", time.Unix(0, up.rdl.Load()).Sub(start), watchDelay, err)
	}
}

// TestUpstreamWriteDeadlineIsKeptPerConnection: a pooled upstream
// connection remembers its write deadline across exchanges, so a busy
// connection re-arms it only when it falls an eighth of
// UpstreamWriteTimeout behind; a deadline set by anyone else (a cancel
// that sets one in the past) is seen, and the next exchange re-arms.
func TestUpstreamWriteDeadlineIsKeptPerConnection(t *testing.T) {
	up := loopbackUpstream(t)
	opts := &Options{UpstreamWriteTimeout: 30 * time.Second}
	exchange := func() *exchange {
		ex := &exchange{}
		ex.opts = opts
		return ex
	}
	if err := exchange().keepUpstreamWriteDeadline(up, time.Now()); err != nil {
		t.Fatal(err)
	}
	first := up.wdl.Load()
	if d := time.Until(time.Unix(0, first)); d < 29*time.Second || d > 30*time.Second {
		t.Fatalf("write deadline in %v, want 30s", d)
	}
	time.Sleep(5 * time.Millisecond)
	if err := exchange().keepUpstreamWriteDeadline(up, time.Now()); err != nil || up.wdl.Load() != first {
		t.Errorf("the next exchange re-armed the deadline (%v → %v, %v)", first, up.wdl.Load(), err)
	}
	_ = up.SetDeadline(aLongTimeAgo)
	if err := exchange().keepUpstreamWriteDeadline(up, time.Now()); err != nil || time.Until(time.Unix(0, up.wdl.Load())) < 29*time.Second {
		t.Errorf("after a deadline in the past the next exchange kept it: %v, %v", time.Unix(0, up.wdl.Load()), err)
	}
	if _, err := up.Write([]byte("x")); err != nil {
		t.Errorf("write after re-arming: %v", err)
	}
}

// loopbackUpstream dials a loopback listener and wraps the connection as
// a pooled upstream connection is wrapped.
func loopbackUpstream(t *testing.T) *upstreamTCP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &upstreamTCP{TCPConn: c.(*net.TCPConn)}
}
