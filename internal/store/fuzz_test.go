package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// seedJournals returns journals written by the store: one with only
// appended changes, one compacted with appended changes after it.
func seedJournals(f *testing.F) [][]byte {
	var out [][]byte
	for _, opts := range []FileOptions{{HistoryLimit: 3}, {HistoryLimit: 2, CompactBytes: 600}} {
		dir := f.TempDir()
		s := openTest(f, dir, opts)
		writeMix(f, s, 30)
		s.Close()
		data, err := os.ReadFile(filepath.Join(dir, journalName))
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

// FuzzOpen opens arbitrary bytes as a journal. Opening must fail with
// ErrCorrupt or succeed; a store that opens must take a write and reopen to
// the same state.
func FuzzOpen(f *testing.F) {
	for _, data := range seedJournals(f) {
		f.Add(data)
		f.Add(data[:len(data)-7])
		f.Add(data[:len(data)/2])
		f.Add(append(bytes.Clone(data), make([]byte, 100)...))
	}
	f.Add([]byte{})
	f.Add([]byte(journalMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, journalName), data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := OpenFile(dir, FileOptions{Now: newClock()})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("OpenFile = %v, want ErrCorrupt or success", err)
			}
			return
		}
		defer s.Close()
		if _, err := s.SetRollback(t.Context(), "", true, AnyVersion, Meta{By: "fuzz"}); err != nil {
			t.Fatalf("SetRollback on an opened store = %v", err)
		}
		want := dumpStore(t, s)
		s.Close()
		s2, err := OpenFile(dir, FileOptions{})
		if err != nil {
			t.Fatalf("reopen = %v", err)
		}
		defer s2.Close()
		if got := dumpStore(t, s2); !reflect.DeepEqual(got, want) {
			t.Fatalf("reopened state differs\n got %+v\nwant %+v", got, want)
		}
	})
}

// frameSep separates payloads in FuzzFrames input. It cannot occur in JSON
// text, where control characters must be escaped.
const frameSep = 0x1e

// splitFrames turns a journal into FuzzFrames input.
func splitFrames(t testing.TB, data []byte) []byte {
	var out []byte
	for i, off := range frameOffsets(t, data) {
		fr, _ := readFrame(data, off)
		if i > 0 {
			out = append(out, frameSep)
		}
		out = append(out, fr.typ)
		out = append(out, fr.body...)
	}
	return out
}

// FuzzFrames feeds the loader well-framed payloads (so that checksums pass
// and the fuzzer reaches JSON decoding and replay validation). Whatever
// loads must survive a checkpoint round trip unchanged.
func FuzzFrames(f *testing.F) {
	for _, data := range seedJournals(f) {
		f.Add(splitFrames(f, data))
	}
	f.Add([]byte(`C{"revision":0,"records":0}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		data := []byte(journalMagic)
		for p := range bytes.SplitSeq(in, []byte{frameSep}) {
			if len(p) < 2 {
				continue
			}
			fr := make([]byte, frameHeaderLen, frameHeaderLen+len(p))
			fr = append(fr, p...)
			data = append(data, fixFrame(fr)...)
		}
		st, res, err := parseJournal(data, 4)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("parseJournal = %v, want ErrCorrupt", err)
			}
			return
		}
		if res.torn != 0 || res.size != int64(len(data)) {
			t.Fatalf("well-framed input reported as torn: %+v", res)
		}
		var buf bytes.Buffer
		if _, err := writeBase(&buf, st); err != nil {
			t.Fatalf("writeBase of a loaded state = %v", err)
		}
		st2, _, err := parseJournal(buf.Bytes(), 4)
		if err != nil {
			t.Fatalf("checkpoint of a loaded state does not load: %v", err)
		}
		if got, want := stateDump(st2), stateDump(st); !reflect.DeepEqual(got, want) {
			t.Fatalf("checkpoint round trip differs\n got %+v\nwant %+v", got, want)
		}
	})
}

// stateDump is dumpStore for a bare state.
func stateDump(st *state) dump {
	d := dump{State: st.snapshot(), History: make(map[string][]Change)}
	if len(st.global.history) > 0 {
		d.History[GlobalKey] = historyOf(&st.global)
	}
	for k, ks := range st.rules {
		d.History[k] = historyOf(ks)
	}
	return d
}
