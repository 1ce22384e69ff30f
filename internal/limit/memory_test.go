//go:build !race

// The memory tests measure the heap and the process's resident set, which
// the race detector's shadow memory makes meaningless; scripts/test.sh runs
// them in a separate invocation without -race.

package limit

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/identity"
)

// procStatus returns a field of /proc/self/status in bytes ("VmRSS",
// "VmHWM").
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("parse %s %q: %v", field, rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// TestMemoryMillionIdentities sends 1,000,000 distinct 256-byte ids (the
// longest identity.max_length admits by default) through the identity
// resolver and a per-identity limiter with the default bounds, as the data
// plane does for each request, while alice, who spent her only token,
// comes back every 10,000 requests. The process's peak resident set
// (VmHWM, garbage included) stays under 80 MiB, the limiter's table under
// its 16 MiB budget, and alice's bucket is never evicted. The peak is about
// 51 MiB on a quiet machine; on a loaded one the collector runs later and
// it has reached 69 MiB, hence the bound.
func TestMemoryMillionIdentities(t *testing.T) {
	const (
		ids    = 1_000_000
		rssMax = 80 << 20
	)
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	res := identity.NewResolver(identity.Config{}, nil)
	l := New(Config{RPS: 0.001, Burst: 1, PerIdentity: true}, clock)
	req := &attr.Map{Headers: map[string]string{"X-User-Id": ""}}
	allow := func(v string) bool {
		req.Headers["X-User-Id"] = v
		id := res.Resolve(req)
		if id.Refused != nil || id.Value != v {
			t.Fatalf("Resolve(%.20q…) = %+v", v, id)
		}
		ok, _ := l.Allow(id.Value)
		return ok
	}
	runtime.GC()
	debug.FreeOSMemory()
	// Reset VmHWM to the current RSS, so that the peak is this test's.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	base := procStatus(t, "VmRSS")
	if !allow("alice") || allow("alice") {
		t.Fatal("alice's burst of 1")
	}
	buf := []byte(strings.Repeat("u", 256))
	start := time.Now()
	for i := 0; i < ids; i++ {
		strconv.AppendInt(buf[:0], int64(i), 10)
		allow(string(buf)) // a new string per request, like a request buffer's
		if i%10_000 == 0 && allow("alice") {
			t.Fatalf("alice's spent bucket was evicted after %d ids", i)
		}
	}
	elapsed := time.Since(start)
	peak := procStatus(t, "VmHWM")
	runtime.GC()
	debug.FreeOSMemory()
	after := procStatus(t, "VmRSS")
	prob, prot, bytes := l.size()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("heap alloc %.1f inuse %.1f sys %.1f released %.1f MiB", mib(int64(ms.HeapAlloc)), mib(int64(ms.HeapInuse)), mib(int64(ms.HeapSys)), mib(int64(ms.HeapReleased)))
	t.Logf("%d ids in %v; table %d + %d entries, %.1f MiB charged; RSS %.1f MiB before, %.1f after, peak %.1f",
		ids, elapsed.Round(time.Millisecond), prob, prot, float64(bytes)/(1<<20), mib(base), mib(after), mib(peak))
	if bytes > DefaultMaxIdentityBytes {
		t.Errorf("the table is charged %d bytes, over its budget %d", bytes, DefaultMaxIdentityBytes)
	}
	if peak > rssMax {
		t.Errorf("peak RSS %.1f MiB, over %d MiB", mib(peak), rssMax>>20)
	}
}

// TestMemoryEntryOverhead checks the byte accounting against the heap: the
// live heap per bucket is at most what the bucket is charged (its
// identity's length plus EntryOverhead, see cost), for short, typical and
// long ids, at table sizes that leave the map at different loads.
func TestMemoryEntryOverhead(t *testing.T) {
	for _, n := range []int{4, 8, 36, 64, 256, 257, 1000, 4096} {
		for _, entries := range []int{3000, 20000, 50000} {
			t.Run(fmt.Sprintf("%d-byte ids, %d entries", n, entries), func(t *testing.T) {
				ids := make([]string, entries)
				for i := range ids {
					b := bytes.Repeat([]byte{'x'}, n)
					binary.BigEndian.PutUint32(b, uint32(i))
					ids[i] = string(b)
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				l := New(Config{RPS: 1, PerIdentity: true, MaxIdentities: 1 << 30, MaxIdentityBytes: 1 << 40}, nil)
				for _, id := range ids {
					l.Allow(id)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
				_, _, charged := l.size()
				if heap > charged {
					t.Errorf("%d buckets use %d bytes of heap (%d each), but are charged %d (%d each)",
						len(ids), heap, heap/int64(len(ids)), charged, charged/int64(len(ids)))
				}
				t.Logf("heap %d bytes per bucket, charged %d", heap/int64(len(ids)), charged/int64(len(ids)))
				runtime.KeepAlive(l)
				runtime.KeepAlive(ids) // freeing them would hide the identities' copies
			})
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
