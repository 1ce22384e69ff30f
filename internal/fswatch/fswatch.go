// Package fswatch follows files through symbolic links for the watches of
// the config file (config.Watch) and of the TLS files (certs.Store.Watch).
// Operators rarely point graygate at a plain file: certbot's live/ links
// point into archive/, a Kubernetes volume's items point through ..data
// into a timestamped directory, and operators add links of their own. A
// change to any link on the way, or to the file at the end, changes what
// the path reads; Chain names them all, and Follow keeps an fsnotify
// watch on the directories they are in, moving it as the links move, and
// on the directories above them, so that one of those replaced by a rename
// is seen too.
package fswatch

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fsnotify/fsnotify"
)

// maxLinks is how many symbolic links Chain follows, as Linux does
// (MAXSYMLINKS), before it gives up on a loop.
const maxLinks = 40

// Chain lists the entries whose change can change what reading path
// gives: every symbolic link met while resolving it, in any component and
// in the order met, then the file it ends at, or instead the first entry
// that is missing (a link between its removal and its re-creation), whose
// creation is an event in its directory. Each is named under its real
// directory, one without links, which is what a watch reports events in.
// It resolves as the kernel does: ".." after a link is taken in the
// link's target, not lexically.
func Chain(path string) []string {
	if !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err != nil {
			return []string{filepath.Clean(path)}
		}
		path = wd + string(filepath.Separator) + path
	}
	root := func(p string) (string, []string) {
		v := filepath.VolumeName(p)
		return v + string(filepath.Separator), components(p[len(v):])
	}
	var out []string
	dir, rest := root(path)
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == ".." {
			dir = filepath.Dir(dir)
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			return append(out, p)
		case fi.Mode()&fs.ModeSymlink != 0:
			out = append(out, p)
			target, err := os.Readlink(p)
			if links++; err != nil || links > maxLinks {
				return out
			}
			if filepath.IsAbs(target) {
				var more []string
				dir, more = root(target)
				rest = append(more, rest...)
			} else {
				rest = append(components(target), rest...)
			}
		case len(rest) == 0:
			return append(out, p)
		default:
			dir = p
		}
	}
	return out
}

// components splits a path into its names, without empty ones and ".".
func components(p string) []string {
	var out []string
	for _, c := range strings.Split(p, string(filepath.Separator)) {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// Follow watches, with w, the directory of every entry of the chains of
// paths (see Chain), and stops watching the directories no longer on any,
// such as a Kubernetes volume's old timestamped directory. It returns the
// names whose events matter: the entries, the watched directories and
// every directory above them. Call it again after every change, before
// reading the files, so that a change made after the read is an event
// again. Directories it could not watch are errors; the others are watched
// all the same.
//
// The directories above are watched too, as well as they can be (one that
// cannot be read is skipped, not an error): a directory on the way that is
// replaced by a rename (mv new conf) changes what the path reads, yet the
// kernel tells only the directory it is renamed in, and the watch on the
// entry's own directory stays on the old one, now elsewhere. So every
// watch is placed again on each call, on whatever its path names now.
func Follow(w *fsnotify.Watcher, paths []string) (map[string]bool, error) {
	relevant := map[string]bool{}
	dirs := map[string]bool{}  // the entries' own: a failure is an error
	above := map[string]bool{} // those above them: watched if they can be
	for _, p := range paths {
		for _, e := range Chain(p) {
			relevant[e] = true
			dirs[filepath.Dir(e)] = true
		}
	}
	for d := range dirs {
		for p := d; ; {
			up := filepath.Dir(p)
			if up == p {
				break
			}
			relevant[p] = true
			above[up] = true
			p = up
		}
	}
	// fsnotify forgets a watch whose directory was removed or moved, so
	// its list is what is watched now; a directory above one it watches
	// can move without its knowing, which leaves that watch in the list,
	// on the moved directory.
	watched := map[string]bool{}
	for _, d := range w.WatchList() {
		watched[d] = true
	}
	var errs []error
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		relevant[d] = true
		if err := rewatch(w, d, watched[d]); err != nil {
			errs = append(errs, fmt.Errorf("watch %s: %w", d, err))
		}
	}
	for _, d := range slices.Sorted(maps.Keys(above)) {
		if !dirs[d] {
			_ = rewatch(w, d, watched[d])
		}
	}
	for d := range watched {
		if !dirs[d] && !above[d] {
			// An error means the kernel dropped it already.
			_ = w.Remove(d)
		}
	}
	return relevant, errors.Join(errs...)
}

// rewatch places w's watch of dir on the directory dir names now. A watch
// is kept by the directory, not the name, so one that is already there is
// removed first: adding it again would keep the old one too when dir now
// names another directory. An event between the two is not lost to the
// caller, who reads the files after Follow.
func rewatch(w *fsnotify.Watcher, dir string, watched bool) error {
	if watched {
		// An error means the kernel dropped it already.
		_ = w.Remove(dir)
	}
	return w.Add(dir)
}

// Relevant reports whether ev names one of relevant's names.
func Relevant(relevant map[string]bool, ev fsnotify.Event) bool {
	return relevant[filepath.Clean(ev.Name)]
}
