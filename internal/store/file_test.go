package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// dump is everything a store returns: the state and every key's history.
type dump struct {
	State   State
	History map[string][]Change
}

func dumpStore(t testing.TB, s Store) dump {
	t.Helper()
	ctx := context.Background()
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	d := dump{State: st, History: make(map[string][]Change)}
	keys := []string{GlobalKey}
	if fs, ok := s.(*FileStore); ok {
		fs.mu.RLock()
		for k := range fs.st.rules {
			keys = append(keys, k)
		}
		fs.mu.RUnlock()
	}
	for _, k := range keys {
		h, err := s.History(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("History(%q) = %v", k, err)
		}
		d.History[k] = h
	}
	return d
}

// writeMix performs n varied changes, deterministically.
func writeMix(t testing.TB, s Store, n int) {
	t.Helper()
	ctx := context.Background()
	keys := []string{"alpha", "beta.v2", "gamma:x", "delta-1", "eps_0"}
	for i := range n {
		k := keys[i%len(keys)]
		m := Meta{By: fmt.Sprintf("user%d", i%3), Reason: fmt.Sprintf("change <%d> & \u2028 \xff", i)}
		var err error
		switch i % 11 {
		case 3:
			_, err = s.Delete(ctx, k, AnyVersion, m)
			if errors.Is(err, ErrNotFound) {
				err = nil
			}
		case 5:
			_, err = s.SetRollback(ctx, k, i%2 == 1, AnyVersion, m)
			if errors.Is(err, ErrNotFound) {
				err = nil
			}
		case 7:
			_, err = s.SetRollback(ctx, "", i%3 == 1, AnyVersion, m)
		case 9:
			m.Op = OpRevert
			_, err = s.Put(ctx, k, raw(fmt.Sprintf(`{"reverted": %d}`, i)), AnyVersion, m)
		default:
			_, err = s.Put(ctx, k, raw(fmt.Sprintf(` { "i" : %d, "html": "<a&b>", "u": "\u2028 é" } `, i)), AnyVersion, m)
		}
		if err != nil {
			t.Fatalf("change %d on %q: %v", i, k, err)
		}
	}
}

func TestReopenIdentical(t *testing.T) {
	tests := []struct {
		name string
		opts FileOptions
	}{
		{"journal only", FileOptions{HistoryLimit: 5}},
		{"compacting often", FileOptions{HistoryLimit: 5, CompactBytes: 512}},
		{"compacting every write", FileOptions{HistoryLimit: 2, CompactBytes: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, tt.opts)
			writeMix(t, s, 120)
			before := dumpStore(t, s)
			if before.State.Revision < 100 {
				t.Fatalf("only %d changes were written", before.State.Revision)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			after := dumpStore(t, openTest(t, dir, tt.opts))
			if !reflect.DeepEqual(before, after) {
				t.Errorf("reopened store differs\nbefore: %+v\nafter:  %+v", before, after)
			}
		})
	}
}

func TestConcurrentCAS(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, t.TempDir(), FileOptions{})
	const writers, rounds = 8, 25
	e, err := s.Put(ctx, "hot", raw(`{"round":0}`), 0, Meta{})
	if err != nil {
		t.Fatal(err)
	}
	// Readers run throughout, so the race detector sees reads against
	// writes.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Load(ctx); err != nil {
					t.Errorf("Load() = %v", err)
					return
				}
				if _, err := s.History(ctx, "hot"); err != nil {
					t.Errorf("History() = %v", err)
					return
				}
			}
		})
	}
	version := e.Version
	for round := 1; round <= rounds; round++ {
		var wins sync.WaitGroup
		var mu sync.Mutex
		var won []int
		var others []error
		start := make(chan struct{})
		for w := range writers {
			wins.Go(func() {
				<-start
				_, err := s.Put(ctx, "hot", raw(fmt.Sprintf(`{"round":%d,"w":%d}`, round, w)), version, Meta{By: fmt.Sprint(w)})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won = append(won, w)
				case !errors.Is(err, ErrConflict):
					others = append(others, err)
				}
			})
		}
		close(start)
		wins.Wait()
		if len(won) != 1 || len(others) != 0 {
			t.Fatalf("round %d: winners %v, unexpected errors %v; want exactly one winner", round, won, others)
		}
		e, err := s.Get(ctx, "hot")
		if err != nil || e.Version != version+1 || e.UpdatedBy != fmt.Sprint(won[0]) {
			t.Fatalf("round %d: Get = version %d by %q, %v; want version %d by %d", round, e.Version, e.UpdatedBy, err, version+1, won[0])
		}
		version = e.Version
	}
	close(stop)
	readers.Wait()
}

func TestLock(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, FileOptions{})
	_, err := OpenFile(dir, FileOptions{})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("second OpenFile = %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	if _, err := s.Put(t.Context(), "a", raw(`{}`), 0, Meta{}); err != nil {
		t.Fatalf("Put after a refused second open = %v", err)
	}
	s.Close()
	s2 := openTest(t, dir, FileOptions{})
	if _, err := s2.Get(t.Context(), "a"); err != nil {
		t.Fatalf("Get after reopen = %v", err)
	}
}

// TestMissingJournalWarns: a data dir that was used before (its lock file
// and experiment data are there) but has lost its journal opens empty, and
// says so as a warning; a new or empty dir, or one holding only files that
// are not the store's, opens quietly.
func TestMissingJournalWarns(t *testing.T) {
	open := func(dir string) string {
		var logs bytes.Buffer
		s, err := OpenFile(dir, FileOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		return logs.String()
	}
	used := t.TempDir()
	if out := open(used); strings.Contains(out, "WARN") {
		t.Errorf("an empty dir: %s", out)
	}
	if err := os.Remove(filepath.Join(used, journalName)); err != nil {
		t.Fatal(err)
	}
	if out := open(used); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "holds no journal") {
		t.Errorf("a used dir whose journal was deleted opened without a warning: %s", out)
	}
	if out := open(filepath.Join(t.TempDir(), "new")); strings.Contains(out, "WARN") {
		t.Errorf("a new dir: %s", out)
	}
	// data_dir: . beside the config file: files that are not the store's
	// do not make a first start look like a lost journal.
	beside := t.TempDir()
	if err := os.WriteFile(filepath.Join(beside, "graygate.yaml"), []byte("listen: :8080\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := open(beside); strings.Contains(out, "WARN") {
		t.Errorf("a dir holding only a config file: %s", out)
	}
	// experiment data alone (the journal and lock deleted) still warns.
	exp := t.TempDir()
	if err := os.Mkdir(filepath.Join(exp, "experiments"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out := open(exp); !strings.Contains(out, "holds no journal") {
		t.Errorf("a dir holding experiment data opened without a warning: %s", out)
	}
}

func TestOpenCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	s := openTest(t, dir, FileOptions{})
	if s.Kind() != "file" {
		t.Errorf("Kind() = %q", s.Kind())
	}
	if _, err := os.Stat(filepath.Join(dir, journalName)); err != nil {
		t.Fatalf("journal not created: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := OpenFile(file, FileOptions{}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("OpenFile(a regular file) = %v", err)
	}
	for _, n := range []int{-1, MaxHistoryLimit + 1} {
		if _, err := OpenFile(t.TempDir(), FileOptions{HistoryLimit: n}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("HistoryLimit %d", n)) {
			t.Errorf("OpenFile(HistoryLimit %d) = %v, want ErrInvalid naming it", n, err)
		}
	}
	s, err := OpenFile(t.TempDir(), FileOptions{HistoryLimit: MaxHistoryLimit})
	if err != nil {
		t.Fatalf("OpenFile(HistoryLimit %d) = %v", MaxHistoryLimit, err)
	}
	s.Close()
}

// frameOffsets returns the start offset of every frame in a journal.
func frameOffsets(t testing.TB, data []byte) []int {
	t.Helper()
	var offs []int
	for off := len(journalMagic); off < len(data); {
		fr, ferr := readFrame(data, off)
		if ferr != nil {
			t.Fatalf("frame at %d: %v", off, ferr)
		}
		offs = append(offs, off)
		off = fr.next
	}
	return offs
}

// journalWith builds a store with a checkpoint holding one change and then n
// appended changes, and returns its dir, journal bytes and dumps after n-1
// and n changes.
func journalWith(t *testing.T, n int) (dir string, data []byte, prev, last dump) {
	t.Helper()
	dir = t.TempDir()
	s := openTest(t, dir, FileOptions{})
	writeMix(t, s, 1)
	s.wmu.Lock()
	s.compactBytes = 1
	s.maybeCompact()
	s.compactBytes = 1 << 40
	s.wmu.Unlock()
	for i := range n {
		if i == n-1 {
			prev = dumpStore(t, s)
		}
		if _, err := s.Put(t.Context(), "last", raw(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("p", 300))), AnyVersion, Meta{By: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	last = dumpStore(t, s)
	s.Close()
	data, err := os.ReadFile(filepath.Join(dir, journalName))
	if err != nil {
		t.Fatal(err)
	}
	return dir, data, prev, last
}

func TestTornTail(t *testing.T) {
	dir, data, prev, last := journalWith(t, 3)
	offs := frameOffsets(t, data)
	start := offs[len(offs)-1] // the last change frame
	path := filepath.Join(dir, journalName)

	type variant struct {
		name string
		data []byte
	}
	var variants []variant
	for _, cut := range []int{start + 1, start + 5, start + frameHeaderLen - 1, start + frameHeaderLen, start + frameHeaderLen + 1, (start + len(data)) / 2, len(data) - 1} {
		variants = append(variants, variant{fmt.Sprintf("cut at %d", cut-start), data[:cut]})
	}
	for _, zeroFrom := range []int{start, start + 4, start + frameHeaderLen, start + 100} {
		d := bytes.Clone(data)
		clear(d[zeroFrom:])
		variants = append(variants, variant{fmt.Sprintf("zeros from %d", zeroFrom-start), d})
	}
	d := bytes.Clone(data)
	d[len(d)-3] ^= 0x40
	variants = append(variants, variant{"last payload damaged", d})
	variants = append(variants, variant{"zero page after the last frame", slices.Concat(data, make([]byte, 4096))})
	variants = append(variants, variant{"header cut short after zeros", slices.Concat(data, []byte{1, 2, 3})})

	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for _, e := range must(os.ReadDir(dir)) {
				if strings.Contains(e.Name(), tornPrefix) {
					os.Remove(filepath.Join(dir, e.Name()))
				}
			}
			if err := os.WriteFile(path, v.data, 0o600); err != nil {
				t.Fatal(err)
			}
			want := prev
			if len(v.data) > len(data) {
				want = last
			}
			s := openTest(t, dir, FileOptions{})
			if got := dumpStore(t, s); !reflect.DeepEqual(got, want) {
				t.Fatalf("state after torn tail = revision %d, want revision %d", got.State.Revision, want.State.Revision)
			}
			// The tail was cut off, so a new write lands right after the
			// last good frame and survives another reopen.
			if _, err := s.Put(t.Context(), "after", raw(`{}`), 0, Meta{}); err != nil {
				t.Fatal(err)
			}
			want = dumpStore(t, s)
			s.Close()
			if got := dumpStore(t, openTest(t, dir, FileOptions{})); !reflect.DeepEqual(got, want) {
				t.Fatalf("write after a torn tail did not survive reopen")
			}
			var saved []byte
			for _, e := range must(os.ReadDir(dir)) {
				if strings.Contains(e.Name(), tornPrefix) {
					saved = must(os.ReadFile(filepath.Join(dir, e.Name())))
				}
			}
			goodEnd := start
			if len(v.data) > len(data) {
				goodEnd = len(data)
			}
			if !bytes.Equal(saved, v.data[goodEnd:]) {
				t.Errorf("saved torn tail has %d bytes, want the %d cut off", len(saved), len(v.data)-goodEnd)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestOpenCorrupt(t *testing.T) {
	_, data, _, _ := journalWith(t, 3)
	offs := frameOffsets(t, data)
	mid := offs[len(offs)-2] // a change frame with another after it
	last := offs[len(offs)-1]

	// reframe replaces the frame at off with one holding payload p.
	reframe := func(off int, typ byte, p string) []byte {
		fr, ferr := readFrame(data, off)
		if ferr != nil {
			t.Fatal(ferr)
		}
		var v any
		if err := json.Unmarshal([]byte(p), &v); err != nil {
			// Not JSON: frame the raw text.
			b := make([]byte, frameHeaderLen)
			b = append(b, typ)
			b = append(b, p...)
			return slices.Concat(data[:off], fixFrame(b), data[fr.next:])
		}
		b := must(encodeFrame(typ, json.RawMessage(p)))
		return slices.Concat(data[:off], b, data[fr.next:])
	}
	// body returns the JSON payload of the frame at off.
	body := func(off int) string {
		fr, _ := readFrame(data, off)
		return string(fr.body)
	}
	flip := func(off int) []byte {
		d := bytes.Clone(data)
		d[off] ^= 0x01
		return d
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty file", nil, "file is empty"},
		{"wrong magic", slices.Concat([]byte("graygate store journal v9\n"), data[len(journalMagic):]), "missing header"},
		{"header only", []byte(journalMagic), "checkpoint: frame header cut short"},
		{"checkpoint cut short", data[:offs[0]+20], "checkpoint: frame cut short"},
		{"checkpoint damaged", flip(offs[0] + frameHeaderLen + 3), "checkpoint: frame checksum mismatch"},
		{"checkpoint record missing", data[:offs[1]], "checkpoint record 1 of 1: frame header cut short"},
		{"middle frame damaged", flip(mid + frameHeaderLen + 5), "frame checksum mismatch"},
		{"middle frame length damaged", flip(mid + 1), "frame header checksum mismatch"},
		{"last frame header damaged", flip(last + 2), "frame header checksum mismatch"},
		{"garbage after the last frame", slices.Concat(data, []byte("garbage that is not a frame")), "frame header checksum mismatch"},
		{"unknown frame type", reframe(mid, 'X', body(mid)), `type 'X'`},
		{"checkpoint frame after the checkpoint", reframe(mid, frameCheckpoint, body(offs[0])), `type 'C'`},
		{"unknown field", reframe(mid, frameChange, strings.Replace(body(mid), `"key"`, `"extra":1,"key"`, 1)), "unknown field"},
		{"trailing data", reframe(mid, frameChange, body(mid)+` {}`), "trailing data"},
		{"not JSON", reframe(mid, frameChange, `{"key":`), "change record"},
		{"version gap", reframe(mid, frameChange, strings.Replace(body(mid), `"version":2`, `"version":5`, 1)), "version 5 does not follow 1"},
		{"revision gap", reframe(mid, frameChange, strings.Replace(body(mid), `"revision":3`, `"revision":9`, 1)), "revision 9 does not follow 2"},
		{"rule not an object", reframe(mid, frameChange, strings.Replace(strings.TrimSuffix(body(mid), "}"), `"rule":{`, `"rule":[{`, 1)+"]}"), "rule is not a JSON object"},
		{"update of a missing rule", reframe(offs[2], frameChange, strings.Replace(body(offs[2]), `"create"`, `"update"`, 1)), "update of a missing rule"},
		{"checkpoint revision wrong", reframe(offs[0], frameCheckpoint, `{"revision":7,"records":1}`), "checkpoint claims revision 7"},
		{"checkpoint count too high", reframe(offs[0], frameCheckpoint, `{"revision":1,"records":2}`), "checkpoint record 2 of 2 has type 'R'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, journalName)
			if err := os.WriteFile(path, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := OpenFile(dir, FileOptions{})
			if err == nil {
				s.Close()
				t.Fatalf("OpenFile succeeded, want an error containing %q", tt.want)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "offset") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("OpenFile = %v\nwant ErrCorrupt naming %s, an offset and %q", err, path, tt.want)
			}
			if got := must(os.ReadFile(path)); !bytes.Equal(got, tt.data) {
				t.Fatal("a failed open modified the journal")
			}
		})
	}
}

// fixFrame fills in the header of a frame whose payload is in place.
func fixFrame(b []byte) []byte {
	p := b[frameHeaderLen:]
	var hdr [frameHeaderLen]byte
	putHeader(hdr[:], p)
	copy(b, hdr[:])
	return b
}

func TestLeftoverCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, FileOptions{})
	writeMix(t, s, 20)
	want := dumpStore(t, s)
	s.Close()
	tmp := filepath.Join(dir, journalName+tmpSuffix)
	if err := os.WriteFile(tmp, []byte(journalMagic+"half a checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := dumpStore(t, openTest(t, dir, FileOptions{})); !reflect.DeepEqual(got, want) {
		t.Error("state changed by a leftover checkpoint file")
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover checkpoint not removed: %v", err)
	}
}

func TestCompactionFailureKeepsWriting(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openTest(t, dir, FileOptions{CompactBytes: 1})
	// A directory where the checkpoint file should go makes every
	// compaction fail.
	tmp := filepath.Join(dir, journalName+tmpSuffix)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := s.Put(ctx, "a", raw(fmt.Sprintf(`{"i":%d}`, i)), AnyVersion, Meta{}); err != nil {
			t.Fatalf("Put %d with compaction failing = %v", i, err)
		}
	}
	if s.j.base == s.j.size {
		t.Fatal("journal was compacted although the checkpoint could not be written")
	}
	want := dumpStore(t, s)
	s.Close()
	if got := dumpStore(t, openTest(t, dir, FileOptions{})); !reflect.DeepEqual(got, want) {
		t.Error("reopened state differs after failed compactions")
	}
}

func TestWriteFailure(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openTest(t, dir, FileOptions{})
	if _, err := s.Put(ctx, "a", raw(`{"v":1}`), 0, Meta{}); err != nil {
		t.Fatal(err)
	}
	want := dumpStore(t, s)
	// Yank the file from under the store: the write fails, and so does
	// cutting the file back, so the store must refuse further writes.
	s.wmu.Lock()
	s.j.f.Close()
	s.wmu.Unlock()
	if _, err := s.Put(ctx, "a", raw(`{"v":2}`), 1, Meta{}); err == nil {
		t.Fatal("Put on a closed file succeeded")
	}
	if _, err := s.Put(ctx, "a", raw(`{"v":2}`), 1, Meta{}); err == nil || !strings.Contains(err.Error(), "reopen") {
		t.Fatalf("Put after a failed cut-back = %v, want a refusal", err)
	}
	if got := dumpStore(t, s); !reflect.DeepEqual(got, want) {
		t.Error("a failed write changed the in-memory state")
	}
	s.lock.Close()
	if got := dumpStore(t, openTest(t, dir, FileOptions{})); !reflect.DeepEqual(got, want) {
		t.Error("a failed write changed the state on disk")
	}
}

// whitelistRule returns a rule with n whitelist entries.
func whitelistRule(n int) json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"match":{"user_ids":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"user-%012d"`, i)
	}
	b.WriteString(`]},"target":"canary"}`)
	return b.Bytes()
}

func TestLargeRule(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openTest(t, dir, FileOptions{})
	big := whitelistRule(100_000)
	if len(big) < 1<<20 {
		t.Fatalf("rule is only %d bytes", len(big))
	}
	start := time.Now()
	for i := range 3 {
		if _, err := s.Put(ctx, "whitelist", big, AnyVersion, Meta{By: fmt.Sprint(i)}); err != nil {
			t.Fatalf("Put(%d bytes) = %v", len(big), err)
		}
	}
	t.Logf("3 puts of %d bytes took %v", len(big), time.Since(start))
	s.Close()
	s = openTest(t, dir, FileOptions{})
	e, err := s.Get(ctx, "whitelist")
	if err != nil || !bytes.Equal(e.Rule, big) || e.Version != 3 {
		t.Fatalf("Get after reopen = %d bytes version %d, %v", len(e.Rule), e.Version, err)
	}
	if _, err := s.Put(ctx, "huge", make([]byte, maxRuleBytes+1), AnyVersion, Meta{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Put over the size limit = %v, want ErrInvalid", err)
	}
}

func TestSequentialPutsFast(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, t.TempDir(), FileOptions{})
	start := time.Now()
	for i := range 500 {
		if _, err := s.Put(ctx, fmt.Sprintf("rule-%d", i%20), raw(fmt.Sprintf(`{"weight":%d}`, i)), AnyVersion, Meta{By: "bench"}); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	t.Logf("500 sequential puts took %v", took)
	if took > 10*time.Second {
		t.Errorf("500 sequential puts took %v, want well under 10s", took)
	}
}

func BenchmarkPut(b *testing.B) {
	ctx := b.Context()
	s := openTest(b, b.TempDir(), FileOptions{})
	rule := raw(`{"match":{"header":"x-canary"},"groups":[{"weight":10,"target":"v2"}]}`)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.Put(ctx, fmt.Sprintf("rule-%d", i%50), rule, AnyVersion, Meta{}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkLoad(b *testing.B) {
	s := openTest(b, b.TempDir(), FileOptions{})
	writeMix(b, s, 200)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Load(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
