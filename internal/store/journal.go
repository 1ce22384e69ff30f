package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// journalMagic starts every journal file and names the format version.
const journalMagic = "graygate store journal v1\n"

// Frame layout: a 12-byte header, then the payload.
//
//	[0:4]   payload length, little endian
//	[4:8]   CRC-32C of bytes [0:4]
//	[8:12]  CRC-32C of the payload
//	[12:]   payload: one type byte, then one JSON value
const (
	frameHeaderLen = 12
	// maxPayload bounds a frame so that a damaged length can never make the
	// loader allocate or skip gigabytes. A frame holds at most two rules.
	maxPayload = 256 << 20
	// maxRuleBytes bounds one rule so that any frame stays below maxPayload.
	maxRuleBytes = 64 << 20
)

// Frame types.
const (
	frameCheckpoint = 'C' // first frame: checkpoint
	frameBase       = 'B' // one retained change of the checkpoint
	frameChange     = 'R' // one change appended after the checkpoint
)

// castagnoli is the CRC-32C table. It is computed once and never written
// after, so it is a constant in all but syntax.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkpoint is the payload of the first frame. Records base frames follow
// it; together they hold the retained history of every key, from which the
// whole state at Revision is rebuilt.
type checkpoint struct {
	Revision int64 `json:"revision"`
	Records  int64 `json:"records"`
}

// encodeFrame returns a complete frame holding v as JSON. HTML escaping is
// off so that rule bytes are stored exactly as compacted by Put.
func encodeFrame(typ byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(make([]byte, frameHeaderLen))
	buf.WriteByte(typ)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode frame: %w", err)
	}
	b := buf.Bytes()
	b = b[:len(b)-1] // Encode appends a newline.
	n := len(b) - frameHeaderLen
	if n > maxPayload {
		return nil, fmt.Errorf("encode frame: %d bytes exceeds the frame limit of %d", n, maxPayload)
	}
	putHeader(b[:frameHeaderLen], b[frameHeaderLen:])
	return b, nil
}

// putHeader writes the frame header for payload into hdr.
func putHeader(hdr, payload []byte) {
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(hdr[4:8], crc32.Checksum(hdr[0:4], castagnoli))
	binary.LittleEndian.PutUint32(hdr[8:12], crc32.Checksum(payload, castagnoli))
}

// frame is one decoded frame.
type frame struct {
	typ  byte
	body []byte // the JSON after the type byte
	next int    // offset of the following frame
}

// frameError says why a frame could not be read, and whether the damage is
// what an interrupted append leaves behind: a prefix of the frame, or the
// frame's full length with pages that never reached the disk (read as
// zeros). Only such damage at the very end of the journal is torn.
type frameError struct {
	msg  string
	torn bool
}

func (e *frameError) Error() string { return e.msg }

// readFrame reads the frame at off.
func readFrame(data []byte, off int) (frame, *frameError) {
	rest := data[off:]
	if len(rest) < frameHeaderLen {
		return frame{}, &frameError{msg: fmt.Sprintf("frame header cut short (%d of %d bytes)", len(rest), frameHeaderLen), torn: true}
	}
	if crc32.Checksum(rest[0:4], castagnoli) != binary.LittleEndian.Uint32(rest[4:8]) {
		// A header that is partly or wholly zeros up to the end of the
		// file is an append whose later pages never reached the disk.
		if lastNonZero(rest) < frameHeaderLen {
			return frame{}, &frameError{msg: fmt.Sprintf("frame header checksum mismatch, zeros to the end of the file (%d bytes)", len(rest)), torn: true}
		}
		return frame{}, &frameError{msg: "frame header checksum mismatch"}
	}
	n := binary.LittleEndian.Uint32(rest[0:4])
	if n < 2 || n > maxPayload {
		return frame{}, &frameError{msg: fmt.Sprintf("frame length %d out of range", n)}
	}
	end := frameHeaderLen + int(n)
	if end > len(rest) {
		return frame{}, &frameError{msg: fmt.Sprintf("frame cut short (%d of %d bytes)", len(rest), end), torn: true}
	}
	p := rest[frameHeaderLen:end]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(rest[8:12]) {
		// A checksum mismatch in the last frame is what a crash leaves
		// when the file size reached the disk but some pages did not; in
		// the middle of the file it can only be damage.
		return frame{}, &frameError{msg: "frame checksum mismatch", torn: end == len(rest)}
	}
	return frame{typ: p[0], body: p[1:], next: off + end}, nil
}

// lastNonZero returns the index of the last non-zero byte of b, or -1.
func lastNonZero(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

// decodeStrict decodes one JSON object into v, rejecting unknown fields and
// trailing data: a frame that passed its checksum but does not decode
// exactly was not written by this version and must not be guessed at.
func decodeStrict(body []byte, v any) error {
	if !IsObject(body) {
		return errors.New("payload is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func decodeRecord(body []byte) (*record, error) {
	var r record
	if err := decodeStrict(body, &r); err != nil {
		return nil, err
	}
	r.At = r.At.UTC()
	// Rules are kept compacted, as Put stores them, so that a state that
	// loads is written back byte for byte by the next checkpoint.
	var err error
	if r.Rule, err = compactRaw(r.Rule); err != nil {
		return nil, fmt.Errorf("rule: %w", err)
	}
	if r.Before, err = compactRaw(r.Before); err != nil {
		return nil, fmt.Errorf("before: %w", err)
	}
	return &r, nil
}

// compactRaw compacts b, leaving nil alone.
func compactRaw(b json.RawMessage) (json.RawMessage, error) {
	if b == nil {
		return nil, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(b))
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parsed describes a journal that loaded.
type parsed struct {
	size    int64  // bytes that hold the state; the rest is a torn tail
	base    int64  // bytes of the magic, checkpoint and base frames
	torn    int64  // bytes of the torn tail, if any
	tornWhy string // what was wrong with it
	records int64  // change frames after the checkpoint
}

// parseJournal rebuilds the state from a journal image. It never panics on
// any input. Errors wrap ErrCorrupt and name the offset of the damage.
func parseJournal(data []byte, limit int) (*state, parsed, error) {
	// Every error also says what an operator can do, since the gateway
	// refuses to start on it: damage in the checkpoint leaves nothing to
	// start from, while damage in a change leaves the state before it,
	// which truncating the file at the offset brings back.
	var st *state
	inChanges := false
	corrupt := func(off int, format string, args ...any) error {
		hint := "the damage is in the checkpoint the file starts with, so no state can be read from it: restore the data dir from a backup, or move the file aside to start with an empty store"
		if inChanges {
			hint = fmt.Sprintf("the state up to revision %d, before offset %d, is intact: to serve it, keep a copy of the file and truncate it to %d bytes, which drops the %d bytes from there on (the damaged change and every change after it)",
				st.revision, off, off, len(data)-off)
		}
		return fmt.Errorf("offset %d: %s: %w; %s", off, fmt.Sprintf(format, args...), ErrCorrupt, hint)
	}
	if !bytes.HasPrefix(data, []byte(journalMagic)) {
		if len(data) == 0 {
			return nil, parsed{}, corrupt(0, "file is empty, want the header %q", journalMagic)
		}
		return nil, parsed{}, corrupt(0, "missing header %q", journalMagic)
	}
	st = newState(limit)
	off := len(journalMagic)

	// The checkpoint and its base frames were fsynced before the file was
	// renamed into place, so any damage to them is corruption, never a
	// torn tail.
	fr, ferr := readFrame(data, off)
	if ferr != nil {
		return nil, parsed{}, corrupt(off, "checkpoint: %v", ferr)
	}
	if fr.typ != frameCheckpoint {
		return nil, parsed{}, corrupt(off, "first frame has type %q, want checkpoint %q", fr.typ, frameCheckpoint)
	}
	var cp checkpoint
	if err := decodeStrict(fr.body, &cp); err != nil {
		return nil, parsed{}, corrupt(off, "checkpoint: %v", err)
	}
	if cp.Revision < 0 || cp.Records < 0 {
		return nil, parsed{}, corrupt(off, "checkpoint has revision %d and %d records", cp.Revision, cp.Records)
	}
	off = fr.next

	seen := make(map[string]bool)
	revisions := make(map[int64]bool)
	var ks *keyState
	var group string
	for i := int64(0); i < cp.Records; i++ {
		fr, ferr := readFrame(data, off)
		if ferr != nil {
			return nil, parsed{}, corrupt(off, "checkpoint record %d of %d: %v", i+1, cp.Records, ferr)
		}
		if fr.typ != frameBase {
			return nil, parsed{}, corrupt(off, "checkpoint record %d of %d has type %q, want %q", i+1, cp.Records, fr.typ, frameBase)
		}
		r, err := decodeRecord(fr.body)
		if err != nil {
			return nil, parsed{}, corrupt(off, "checkpoint record: %v", err)
		}
		if i == 0 || r.Key != group {
			if seen[r.Key] {
				return nil, parsed{}, corrupt(off, "key %q appears twice in the checkpoint", r.Key)
			}
			if ks, err = startGroup(st, r); err != nil {
				return nil, parsed{}, corrupt(off, "checkpoint record: %v", err)
			}
			seen[r.Key] = true
			group = r.Key
		} else {
			if r.Before != nil || r.RolledBackBefore {
				return nil, parsed{}, corrupt(off, "key %q version %d: before-state on a record that is not the oldest", r.Key, r.Version)
			}
			if last := ks.history[len(ks.history)-1].Revision; r.Revision <= last {
				return nil, parsed{}, corrupt(off, "key %q version %d: revision %d does not follow %d", r.Key, r.Version, r.Revision, last)
			}
		}
		if r.Revision > cp.Revision || revisions[r.Revision] {
			return nil, parsed{}, corrupt(off, "key %q version %d: revision %d is beyond the checkpoint or used twice", r.Key, r.Version, r.Revision)
		}
		if err := checkRecord(ks, r); err != nil {
			return nil, parsed{}, corrupt(off, "checkpoint record: %v", err)
		}
		revisions[r.Revision] = true
		st.apply(r)
		off = fr.next
	}
	// The newest change of the store is the newest change of its key, and
	// the newest change of every key is always retained.
	if st.revision != cp.Revision {
		return nil, parsed{}, corrupt(off, "checkpoint claims revision %d but its records end at %d", cp.Revision, st.revision)
	}
	res := parsed{base: int64(off)}

	inChanges = true
	for off < len(data) {
		fr, ferr := readFrame(data, off)
		if ferr != nil {
			if !ferr.torn {
				return nil, parsed{}, corrupt(off, "%v", ferr)
			}
			res.torn = int64(len(data) - off)
			res.tornWhy = ferr.msg
			break
		}
		if fr.typ != frameChange {
			return nil, parsed{}, corrupt(off, "frame has type %q, want change %q", fr.typ, frameChange)
		}
		r, err := decodeRecord(fr.body)
		if err != nil {
			return nil, parsed{}, corrupt(off, "change record: %v", err)
		}
		if err := st.checkNext(r); err != nil {
			return nil, parsed{}, corrupt(off, "change record: %v", err)
		}
		st.apply(r)
		res.records++
		off = fr.next
	}
	res.size = int64(off)
	return st, res, nil
}

// startGroup sets up the state of the key of r, the oldest retained record
// of that key in a checkpoint, from the before-state r carries.
func startGroup(st *state, r *record) (*keyState, error) {
	switch {
	case !ValidKey(r.Key) && r.Key != GlobalKey:
		return nil, fmt.Errorf("invalid key %q", r.Key)
	case r.Version < 1:
		return nil, fmt.Errorf("key %q: version %d is not positive", r.Key, r.Version)
	case r.Version == 1 && (r.Before != nil || r.RolledBackBefore):
		return nil, fmt.Errorf("key %q: version 1 has a before-state", r.Key)
	case r.Before != nil && (r.Key == GlobalKey || !IsObject(r.Before)):
		return nil, fmt.Errorf("key %q version %d: before-state is not a rule", r.Key, r.Version)
	case r.Before == nil && r.RolledBackBefore && r.Key != GlobalKey:
		return nil, fmt.Errorf("key %q version %d: a missing rule cannot be rolled back", r.Key, r.Version)
	}
	ks := &keyState{version: r.Version - 1, rule: r.Before, rolledBack: r.RolledBackBefore}
	if r.Before != nil {
		ks.entry = Entry{Key: r.Key, Rule: r.Before, Version: r.Version - 1, RolledBack: r.RolledBackBefore}
	}
	if r.Key == GlobalKey {
		st.global = *ks
		return &st.global, nil
	}
	st.rules[r.Key] = ks
	return ks, nil
}

// writeBase writes the magic, the checkpoint and the base frames for st to
// w and returns the number of bytes written. The global flag's history
// comes first, then the rules' in key order.
func writeBase(w io.Writer, st *state) (int64, error) {
	keys := make([]string, 0, len(st.rules))
	n := int64(len(st.global.history))
	for k, ks := range st.rules {
		keys = append(keys, k)
		n += int64(len(ks.history))
	}
	slices.Sort(keys)
	var written int64
	write := func(b []byte) error {
		m, err := w.Write(b)
		written += int64(m)
		return err
	}
	if err := write([]byte(journalMagic)); err != nil {
		return written, err
	}
	b, err := encodeFrame(frameCheckpoint, checkpoint{Revision: st.revision, Records: n})
	if err != nil {
		return written, err
	}
	if err := write(b); err != nil {
		return written, err
	}
	emit := func(ks *keyState) error {
		for i, c := range ks.history {
			r := record{
				Key: c.Key, Op: c.Op, Version: c.Version, Revision: c.Revision,
				At: c.At, By: c.By, Reason: c.Reason, RolledBack: c.RolledBackAfter,
			}
			switch c.Op {
			case OpCreate, OpUpdate, OpRevert:
				r.Rule = c.After
			}
			if i == 0 {
				r.Before = c.Before
				r.RolledBackBefore = c.RolledBackBefore
			}
			b, err := encodeFrame(frameBase, &r)
			if err != nil {
				return fmt.Errorf("key %q version %d: %w", c.Key, c.Version, err)
			}
			if err := write(b); err != nil {
				return err
			}
		}
		return nil
	}
	if err := emit(&st.global); err != nil {
		return written, err
	}
	for _, k := range keys {
		if err := emit(st.rules[k]); err != nil {
			return written, err
		}
	}
	return written, nil
}
