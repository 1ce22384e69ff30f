package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAccessLogPath: validation refuses an access_log.path that the
// gateway could not open for appending, naming the key and the value,
// whether the log is on or not (--access-log or a later reload turns it
// on), and creates nothing while checking.
func TestAccessLogPath(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.log")
	if err := os.WriteFile(existing, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(dir, "ro")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, yaml string
		want       string // "" for valid
		asRoot     bool   // root writes a mode 0555 directory all the same
	}{
		{name: "stdout", yaml: "access_log: {enabled: true, path: stdout}"},
		{name: "stderr", yaml: "access_log: {enabled: true, path: stderr}"},
		{name: "default", yaml: "access_log: {enabled: true}"},
		{name: "new file", yaml: fmt.Sprintf("access_log: {enabled: true, path: %q}", filepath.Join(dir, "new.log"))},
		{name: "existing file", yaml: fmt.Sprintf("access_log: {enabled: true, path: %q}", existing)},
		{name: "missing directory", yaml: fmt.Sprintf("access_log: {enabled: true, path: %q}", filepath.Join(dir, "nope", "a.log")),
			want: fmt.Sprintf("access_log.path: cannot open %q for appending: directory %s does not exist", filepath.Join(dir, "nope", "a.log"), filepath.Join(dir, "nope"))},
		{name: "missing directory, log off", yaml: fmt.Sprintf("access_log: {enabled: false, path: %q}", filepath.Join(dir, "nope", "a.log")),
			want: fmt.Sprintf("access_log.path: cannot open %q for appending: directory %s does not exist", filepath.Join(dir, "nope", "a.log"), filepath.Join(dir, "nope"))},
		{name: "a file on the way", yaml: fmt.Sprintf("access_log: {path: %q}", filepath.Join(existing, "a.log")),
			want: fmt.Sprintf("access_log.path: cannot open %q for appending: stat %s: not a directory", filepath.Join(existing, "a.log"), filepath.Join(existing, "a.log"))},
		{name: "a directory", yaml: fmt.Sprintf("access_log: {enabled: true, path: %q}", dir),
			want: fmt.Sprintf("access_log.path: cannot open %q for appending: it is a directory", dir)},
		{name: "directory not writable", yaml: fmt.Sprintf("access_log: {enabled: true, path: %q}", filepath.Join(readOnly, "a.log")),
			want: fmt.Sprintf("access_log.path: cannot open %q for appending: directory %s is not writable", filepath.Join(readOnly, "a.log"), readOnly), asRoot: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.asRoot && os.Geteuid() == 0 {
				t.Skip("root may write a directory of mode 0555")
			}
			_, err := Parse([]byte(tt.yaml + "\n"))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Parse(%q) = %v, want no error", tt.yaml, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Parse(%q) = %v\nwant it to contain %q", tt.yaml, err, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "new.log")); !os.IsNotExist(err) {
		t.Errorf("validating created the log file: %v", err)
	}
}
