package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dataDirRule is a gray rule to stable with a whitelist of pad entries, so
// that its size can be chosen.
func dataDirRule(stable string, pct, pad int) string {
	wl := make([]string, pad)
	for i := range wl {
		wl[i] = fmt.Sprintf("%q", fmt.Sprintf("uid:w%d", i))
	}
	return fmt.Sprintf(`{"type":"gray","gray_percent":%d,"white_list":[%s],"targets":{"gray":%q,"stable":%q}}`,
		pct, strings.Join(wl, ","), stable, stable)
}

// dataDirVersions returns every rule's version, as GET /api/v1/rules says.
func dataDirVersions(t *testing.T, admin string) map[string]int {
	t.Helper()
	code, out := apiCall(t, "GET", admin, "/api/v1/rules", "")
	if code != 200 {
		t.Fatalf("GET /api/v1/rules = %d %v", code, out)
	}
	got := map[string]int{}
	for _, r := range out["rules"].([]any) {
		m := r.(map[string]any)
		got[m["key"].(string)] = int(m["version"].(float64))
	}
	return got
}

// TestDataDirRemovedWhileServing removes the data dir of a
// running gateway (rm -rf, a cleaner of /tmp). Writes acknowledged before
// and after the removal must be served after a restart; they were lost,
// because the store went on appending to the deleted journal and the next
// start found an empty data dir and started empty without a warning.
func TestDataDirRemovedWhileServing(t *testing.T) {
	stable := backend(t, "stable")
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startServe(t, "--data-dir", dataDir, "--default-upstream", stable)
	if code, out, err := put(p.admin, "before", dataDirRule(stable, 5, 0)); err != nil || code != 201 {
		t.Fatalf("PUT before = %d %v %v", code, out, err)
	}
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	if code, out, err := put(p.admin, "after", dataDirRule(stable, 7, 0)); err != nil || code != 201 {
		t.Fatalf("PUT after the removal = %d %v %v", code, out, err)
	}
	p.kill(syscall.SIGKILL)

	want := map[string]int{"before": 1, "after": 1}
	first := p
	p = startServe(t, "--data-dir", dataDir, "--default-upstream", stable)
	if got := dataDirVersions(t, p.admin); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rules after the removal and a restart = %v, want %v", got, want)
	}
	first.waitLog(t, "the journal was removed while graygate was running")

	// Removed again with no write after it: a clean stop writes it back.
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	p.kill(syscall.SIGTERM)
	p = startServe(t, "--data-dir", dataDir, "--default-upstream", stable)
	if got := dataDirVersions(t, p.admin); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rules after a removal, a stop and a restart = %v, want %v", got, want)
	}
	p.kill(syscall.SIGTERM)
}

// TestDataDirFullDisk fills the journal's disk of a running gateway (a
// file-size limit on the process, which fails writes with EFBIG as a full
// disk does with ENOSPC). The failed write must say which file failed
// (store.journal, not the .tmp name it was created under, which does not
// exist) and that nothing was changed; the rules keep serving, and writes
// go on once there is room.
func TestDataDirFullDisk(t *testing.T) {
	stable := backend(t, "stable")
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startServe(t, "--data-dir", dataDir, "--default-upstream", stable)
	if code, out, err := put(p.admin, "r", dataDirRule(stable, 5, 0)); err != nil || code != 201 {
		t.Fatalf("PUT r = %d %v %v", code, out, err)
	}
	journal := filepath.Join(dataDir, "store.journal")
	fi, err := os.Stat(journal)
	if err != nil {
		t.Fatal(err)
	}
	pid := p.cmd.Process.Pid
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, nil, &old); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	full := old
	full.Cur = uint64(fi.Size()) + 64
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &full, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	code, out, err := put(p.admin, "r", dataDirRule(stable, 9, 50))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := out["error"].(string)
	if code < 500 || !strings.Contains(msg, "write "+journal+" at offset "+strconv.FormatInt(fi.Size(), 10)) ||
		!strings.Contains(msg, "nothing was changed") || strings.Contains(msg, ".tmp") {
		t.Fatalf("PUT on a full disk = %d %q\nwant a 5xx naming %s at offset %d and saying nothing was changed", code, msg, journal, fi.Size())
	}
	if got := dataDirVersions(t, p.admin); got["r"] != 1 {
		t.Fatalf("rules after the failed write = %v, want r at version 1", got)
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &old, nil); err != nil {
		t.Fatal(err)
	}
	if code, out, err := put(p.admin, "r", dataDirRule(stable, 9, 50)); err != nil || code != 200 || out["version"] != float64(2) {
		t.Fatalf("PUT once there is room = %d %v %v, want version 2", code, out, err)
	}
	p.kill(syscall.SIGKILL)
	p = startServe(t, "--data-dir", dataDir, "--default-upstream", stable)
	if got := dataDirVersions(t, p.admin); got["r"] != 2 {
		t.Fatalf("rules after a restart = %v, want r at version 2", got)
	}
	p.kill(syscall.SIGTERM)
}

// TestDataDirCorruptJournal damages a change in the middle of the
// journal. graygate must refuse to start (never serve a guess), name the
// file and the offset, and say how to get the state before the damage
// back; following that advice must serve it.
func TestDataDirCorruptJournal(t *testing.T) {
	stable := backend(t, "stable")
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startServe(t, "--data-dir", dataDir, "--default-upstream", stable)
	for pct := 11; pct <= 13; pct++ {
		if code, out, err := put(p.admin, "r", dataDirRule(stable, pct, 20)); err != nil || code >= 300 {
			t.Fatalf("PUT r %d%% = %d %v %v", pct, code, out, err)
		}
	}
	p.kill(syscall.SIGTERM)

	journal := filepath.Join(dataDir, "store.journal")
	data, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	// The second version's percentage, in its change frame: one change
	// follows it, so the damage cannot pass for a torn tail.
	i := bytes.Index(data, []byte(`"gray_percent":12`))
	if i < 0 {
		t.Fatalf("the journal does not hold version 2:\n%q", data)
	}
	data[i+len(`"gray_percent":1`)] = '9'
	if err := os.WriteFile(journal, data, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--admin-token", "tok", "--data-dir", dataDir, "--default-upstream", stable)
	outb, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("serve on a corrupt journal = %v (context %v), want it to refuse to start\n%s", err, ctx.Err(), outb)
	}
	m := regexp.MustCompile(`truncate it to (\d+) bytes`).FindSubmatch(outb)
	if m == nil || !bytes.Contains(outb, []byte(journal+": offset "+string(m[1]))) {
		t.Fatalf("serve on a corrupt journal says:\n%s\nwant the file, the offset and how to truncate it", outb)
	}
	off, _ := strconv.ParseInt(string(m[1]), 10, 64)
	if err := os.Truncate(journal, off); err != nil {
		t.Fatal(err)
	}
	p = startServe(t, "--data-dir", dataDir, "--default-upstream", stable)
	if got := dataDirVersions(t, p.admin); got["r"] != 1 {
		t.Fatalf("rules after the truncation = %v, want r at version 1, the state before the damage", got)
	}
	req, _ := http.NewRequest("GET", "http://"+p.data+"/x", nil)
	req.Header.Set("X-User-Id", "w0") // whitelisted: the rule claims it
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "stable" || resp.Header.Get("X-Gray-Rule") != "r" {
		t.Fatalf("data plane after the truncation: %q, X-Gray-Rule %q", body, resp.Header.Get("X-Gray-Rule"))
	}
	p.kill(syscall.SIGTERM)
}
