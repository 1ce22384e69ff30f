package store

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Environment of the helper process that TestCrashSafety kills.
const (
	crashDirEnv   = "GRAYGATE_STORE_CRASH_DIR"
	crashRoundEnv = "GRAYGATE_STORE_CRASH_ROUND"
)

// crashOpts makes the helper compact often and prune, so that kills land in
// compactions as well as in appends.
func crashOpts() FileOptions {
	return FileOptions{HistoryLimit: 16, CompactBytes: 64 << 10}
}

// crashPad returns the padding of write i: mostly small, sometimes large
// enough that one write(2) spans many pages and a kill can cut it short.
func crashPad(i int) int {
	switch i % 10 {
	case 9:
		return 64 << 10
	case 4:
		return 8 << 10
	}
	return 10 + i%50
}

// TestHelperWriter is not a test: it is the child process of
// TestCrashSafety. It writes until it is killed and prints "ACK key version
// n" after each Put returns.
func TestHelperWriter(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process of TestCrashSafety")
	}
	round, _ := strconv.Atoi(os.Getenv(crashRoundEnv))
	s, err := OpenFile(dir, crashOpts())
	if err != nil {
		fmt.Printf("FAIL open: %v\n", err)
		os.Exit(3)
	}
	ctx := t.Context()
	for i := 0; ; i++ {
		n := round*1_000_000 + i
		key := fmt.Sprintf("k%d", i%4)
		rule := fmt.Sprintf(`{"n":%d,"pad":"%s"}`, n, strings.Repeat("x", crashPad(i)))
		e, err := s.Put(ctx, key, json.RawMessage(rule), AnyVersion, Meta{By: "helper"})
		if err != nil {
			fmt.Printf("FAIL put: %v\n", err)
			os.Exit(2)
		}
		// One write per line: the parent only trusts complete lines.
		os.Stdout.WriteString(fmt.Sprintf("ACK %s %d %d\n", key, e.Version, n))
	}
}

type crashAck struct {
	key     string
	version int64
	n       int
}

// TestCrashSafety runs TestHelperWriter in a child process, SIGKILLs it at a
// random moment, and checks that every write it acknowledged is in the
// reopened store.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	var acks []crashAck
	var interrupted int // kills that left a checkpoint half written
	for round := range 5 {
		got := runAndKill(t, dir, round, time.Duration(rng.IntN(700))*time.Millisecond)
		t.Logf("round %d: %d acknowledged writes", round, len(got))
		acks = append(acks, got...)
		if _, err := os.Stat(filepath.Join(dir, journalName+tmpSuffix)); err == nil {
			interrupted++
		}
		checkAcks(t, dir, acks)
	}
	// Neither count can be forced from outside the process, so they are
	// reported, not required. TestTornTail covers torn tails byte by byte.
	torn, _ := filepath.Glob(filepath.Join(dir, journalName+tornPrefix+"*"))
	t.Logf("kills during a checkpoint: %d; torn tails cut off: %d", interrupted, len(torn))
}

// runAndKill starts the helper, lets it write for delay after its first
// acknowledgement, kills it, and returns what it acknowledged.
func runAndKill(t *testing.T, dir string, round int, delay time.Duration) []crashAck {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashRoundEnv+"="+strconv.Itoa(round))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return // a line cut short by the kill was never acknowledged
			}
			lines <- strings.TrimSuffix(line, "\n")
		}
	}()

	var acks []crashAck
	var failure string
	take := func(line string) {
		switch {
		case strings.HasPrefix(line, "ACK "):
			var a crashAck
			if _, err := fmt.Sscanf(line, "ACK %s %d %d", &a.key, &a.version, &a.n); err != nil {
				failure = fmt.Sprintf("bad line %q: %v", line, err)
				return
			}
			acks = append(acks, a)
		case strings.HasPrefix(line, "FAIL"):
			failure = line
		}
	}
	deadline := time.After(30 * time.Second)
	var kill <-chan time.Time
	for kill == nil && failure == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("round %d: helper exited before writing: %s", round, stderr.String())
			}
			take(line)
			if len(acks) > 0 {
				kill = time.After(delay)
			}
		case <-deadline:
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: helper acknowledged nothing in 30s: %s", round, stderr.String())
		}
	}
loop:
	for failure == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			take(line)
		case <-kill:
			break loop
		}
	}
	cmd.Process.Kill() // SIGKILL
	for line := range lines {
		take(line)
	}
	err = cmd.Wait()
	if failure != "" {
		t.Fatalf("round %d: helper: %s\n%s", round, failure, stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("round %d: helper ended with %v, want death by signal\n%s", round, err, stderr.String())
	}
	return acks
}

// checkAcks reopens the store and checks every acknowledged write: the
// rule's version has reached it, and if it is still within the retained
// history, the change is there with the rule that was written.
func checkAcks(t *testing.T, dir string, acks []crashAck) {
	t.Helper()
	ctx := t.Context()
	opts := crashOpts()
	s, err := OpenFile(dir, opts)
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load after kill: %v", err)
	}
	if int(st.Revision) < len(acks) {
		t.Fatalf("revision %d after %d acknowledged writes", st.Revision, len(acks))
	}
	histories := make(map[string]map[int64]Change)
	current := make(map[string]int64)
	for _, e := range st.Rules {
		current[e.Key] = e.Version
		h, err := s.History(ctx, e.Key)
		if err != nil {
			t.Fatalf("History(%q) after kill: %v", e.Key, err)
		}
		histories[e.Key] = make(map[int64]Change)
		for _, c := range h {
			histories[e.Key][c.Version] = c
		}
	}
	checked := 0
	for _, a := range acks {
		cur, ok := current[a.key]
		if !ok || cur < a.version {
			t.Fatalf("acknowledged %s version %d lost: store has version %d", a.key, a.version, cur)
		}
		if a.version <= cur-int64(opts.HistoryLimit) {
			continue // pruned, as it should be
		}
		c, ok := histories[a.key][a.version]
		if !ok {
			t.Fatalf("acknowledged %s version %d missing from history", a.key, a.version)
		}
		var r struct{ N int }
		if err := json.Unmarshal(c.After, &r); err != nil || r.N != a.n {
			t.Fatalf("%s version %d holds n=%d (%v), acknowledged n=%d", a.key, a.version, r.N, err, a.n)
		}
		checked++
	}
	// The reopened store must also take writes.
	if _, err := s.Put(ctx, "after-kill", json.RawMessage(`{}`), AnyVersion, Meta{}); err != nil {
		t.Fatalf("Put after kill: %v", err)
	}
	t.Logf("checked %d acknowledged writes in history, %d in total", checked, len(acks))
}
