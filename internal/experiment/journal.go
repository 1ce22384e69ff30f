package experiment

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
)

// The data-dir store keeps its state in two kinds of files under
// <data_dir>/experiments: one snapshot (the whole state when it was
// written) and journals (what each flush changed since). Both are a
// sequence of frames:
//
//	[0:4]  payload length, little endian
//	[4:8]  CRC-32C of the payload
//	[8:]   payload: one op byte, then the op's fields
//
// Strings are a uvarint length and the bytes; integers are (u)varints.
// Ops:
//
//	'H' gen                       first frame of a snapshot: it holds every journal up to gen
//	'E' exp key ts version group  a first exposure (key is xxh64 of the unit)
//	'F' exp key ts version group  a first exposure that counts in the experiment's phase
//	'B' exp key metric            a binomial conversion of an exposed unit
//	'V' exp key metric delta      a mean metric's value of the unit grew by delta (µ-units)
//	'P' exp phase since alloc n (group count)×n
//	                              the experiment's phase (JSON, see phase.go), when it began
//	                              (Unix ms) and its allocation, and its units per group so far
//	'Q' exp key at ts metric flags value
//	                              a conversion of a unit not (yet) exposed, parked at at
//	                              (Unix ms, the gateway's clock) until its exposure; flags:
//	                              1 binomial, 2 exposes; value in µ-units
//	'X' exp key cutoff            the unit's parked conversions parked at or before cutoff
//	                              (Unix ms) expired: dropped, and counted when they were
//	'Z' records                   last frame of a snapshot: how many records it holds
//
// A unit's first exposure ('E', 'F' of a unit not yet exposed) moves its
// parked conversions: the frames that follow it in the same flush record
// what they counted ('B', 'V', an earlier 'E'), and replaying it clears
// them, as applying it did. A snapshot holds the parked conversions after
// everything else. 'Q' and 'X' are newer than the other ops: a binary
// that predates them refuses a file holding them (unknown record type)
// rather than skipping what it cannot read.
//
// A flush appends all its frames with one write and then fsyncs, so a
// crash leaves at most a torn last frame, which loading drops.
// Flags of opPark.
const (
	parkBinomial = 1 << iota
	parkExposes
)

const (
	opHeader   = 'H'
	opExpose   = 'E'
	opExposeP  = 'F'
	opBinomial = 'B'
	opPhase    = 'P'
	opValue    = 'V'
	opPark     = 'Q'
	opExpire   = 'X'
	opTrailer  = 'Z'

	frameHeader = 8
	// maxFrame bounds a frame so that a damaged length cannot make the
	// loader skip or allocate much: a record holds three short strings.
	maxFrame = 64 << 10
)

// castagnoli is the CRC-32C table; it is never written after it is made.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one decoded frame.
type record struct {
	op     byte
	exp    string
	key    uint64
	ts     int64
	ver    int64
	group  string
	metric string
	value  int64 // the delta of opValue and opPark; gen of opHeader; count of opTrailer
	// at is when opPark's conversion was parked (Unix ms), flags its
	// parkBinomial and parkExposes; opExpire's cutoff is ts.
	at    int64
	flags uint64
	// phase, units (by group) of opPhase; its since is ts, its alloc key.
	phase string
	units map[string]int64
}

// appendFrame appends r as one frame to b.
func appendFrame(b []byte, r *record) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, r.op)
	switch r.op {
	case opHeader, opTrailer:
		b = binary.AppendUvarint(b, uint64(r.value))
	case opExpose, opExposeP:
		b = appendString(b, r.exp)
		b = binary.LittleEndian.AppendUint64(b, r.key)
		b = binary.AppendVarint(b, r.ts)
		b = binary.AppendUvarint(b, uint64(r.ver))
		b = appendString(b, r.group)
	case opPhase:
		b = appendString(b, r.exp)
		b = appendString(b, r.phase)
		b = binary.AppendVarint(b, r.ts)
		b = binary.LittleEndian.AppendUint64(b, r.key)
		groups := slices.Sorted(maps.Keys(r.units))
		b = binary.AppendUvarint(b, uint64(len(groups)))
		for _, g := range groups {
			b = appendString(b, g)
			b = binary.AppendUvarint(b, uint64(r.units[g]))
		}
	case opBinomial:
		b = appendString(b, r.exp)
		b = binary.LittleEndian.AppendUint64(b, r.key)
		b = appendString(b, r.metric)
	case opValue:
		b = appendString(b, r.exp)
		b = binary.LittleEndian.AppendUint64(b, r.key)
		b = appendString(b, r.metric)
		b = binary.AppendVarint(b, r.value)
	case opPark:
		b = appendString(b, r.exp)
		b = binary.LittleEndian.AppendUint64(b, r.key)
		b = binary.AppendVarint(b, r.at)
		b = binary.AppendVarint(b, r.ts)
		b = appendString(b, r.metric)
		b = binary.AppendUvarint(b, r.flags)
		b = binary.AppendVarint(b, r.value)
	case opExpire:
		b = appendString(b, r.exp)
		b = binary.LittleEndian.AppendUint64(b, r.key)
		b = binary.AppendVarint(b, r.ts)
	}
	payload := b[start+frameHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// errTorn marks damage an interrupted append leaves at the end of a file.
var errTorn = errors.New("torn frame at the end of the file")

// readFrames calls fn for every frame of data in order. It returns the
// length of the intact prefix. A frame cut short by the end of data, or a
// bad frame followed by nothing but zeros, is a torn tail: readFrames
// returns errTorn and the prefix before it. Any other damage is an error
// naming the offset; so is an error from fn.
func readFrames(data []byte, fn func(*record) error) (int, error) {
	off := 0
	var r record
	for off < len(data) {
		rest := data[off:]
		if len(rest) < frameHeader {
			return off, errTorn
		}
		n := int(binary.LittleEndian.Uint32(rest))
		if n == 0 && allZero(rest) {
			return off, errTorn
		}
		if n < 1 || n > maxFrame {
			if allZero(rest[4:]) {
				return off, errTorn
			}
			return off, fmt.Errorf("frame at offset %d: length %d out of range", off, n)
		}
		if frameHeader+n > len(rest) {
			return off, errTorn
		}
		payload := rest[frameHeader : frameHeader+n]
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(rest[4:]) {
			if allZero(rest[frameHeader:]) {
				return off, errTorn
			}
			return off, fmt.Errorf("frame at offset %d: checksum mismatch", off)
		}
		if err := decodeRecord(payload, &r); err != nil {
			return off, fmt.Errorf("frame at offset %d: %w", off, err)
		}
		if err := fn(&r); err != nil {
			return off, fmt.Errorf("frame at offset %d: %w", off, err)
		}
		off += frameHeader + n
	}
	return off, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// decodeRecord decodes one payload into r; strings are copied.
func decodeRecord(p []byte, r *record) error {
	d := decoder{b: p[1:]}
	*r = record{op: p[0]}
	switch r.op {
	case opHeader, opTrailer:
		r.value = int64(d.uvarint())
	case opExpose, opExposeP:
		r.exp, r.key, r.ts, r.ver, r.group = d.str(), d.u64(), d.varint(), int64(d.uvarint()), d.str()
	case opPhase:
		r.exp, r.phase, r.ts, r.key = d.str(), d.str(), d.varint(), d.u64()
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			d.err = errShort
		}
		r.units = make(map[string]int64, n)
		prev := ""
		for i := uint64(0); i < n && d.err == nil; i++ {
			g := d.str()
			if i > 0 && g <= prev {
				d.err = errors.New("phase groups out of order") // written sorted, once each
			}
			prev = g
			r.units[g] = int64(d.uvarint())
		}
	case opBinomial:
		r.exp, r.key, r.metric = d.str(), d.u64(), d.str()
	case opValue:
		r.exp, r.key, r.metric, r.value = d.str(), d.u64(), d.str(), d.varint()
	case opPark:
		r.exp, r.key, r.at, r.ts, r.metric, r.flags, r.value = d.str(), d.u64(), d.varint(), d.varint(), d.str(), d.uvarint(), d.varint()
		if r.flags&^(parkBinomial|parkExposes) != 0 {
			d.err = cmp.Or(d.err, fmt.Errorf("unknown flags %#x", r.flags))
		}
	case opExpire:
		r.exp, r.key, r.ts = d.str(), d.u64(), d.varint()
	default:
		return fmt.Errorf("unknown record type %q", r.op)
	}
	if d.err != nil {
		return fmt.Errorf("record %q: %w", r.op, d.err)
	}
	if len(d.b) != 0 {
		return fmt.Errorf("record %q: %d trailing bytes", r.op, len(d.b))
	}
	return nil
}

// decoder reads the fields of a payload; the first problem sticks.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("cut short")

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.err = errShort
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errShort
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
