// Package console is graygate's operator console: a web UI that the admin
// listener serves at /ui/. It is static: the pages, scripts and styles are
// embedded in the binary (nothing comes from a CDN, so it works air-gapped),
// and everything it shows comes from the admin API, called from the
// browser with the operator's bearer token. The token lives in
// sessionStorage and goes out only as an Authorization header, never in a
// cookie (so there is nothing for a cross-site request to ride on) or a
// URL.
//
// The console copes with an admin API that fails (README "Operator
// console"): every request is given up after 10 s without a complete
// answer (TIMEOUT_MS in assets/js/api.js), refreshes run one at a time, a
// screen that cannot refresh keeps what it showed and names the request
// that failed, a change without a clear answer is said to be maybe
// applied (never saved), and a write button is disabled while its change
// is out.
//
// Every response carries a Content-Security-Policy that allows scripts,
// styles and connections from the console's own origin only, with no
// inline script or style, no eval, and Trusted Types required, so a string
// can never become markup: the scripts build the page with textContent and
// DOM calls, never innerHTML. Rule fields such as rule_name are operator
// input and are always shown as text.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy is the policy sent with every console response.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// contentType is the type of a file the console serves, by its extension;
// a file of another kind is not served. The types are fixed here rather
// than taken from the system's MIME tables, which differ between hosts.
func contentType(ext string) (string, bool) {
	switch ext {
	case ".html":
		return "text/html; charset=utf-8", true
	case ".js":
		return "text/javascript; charset=utf-8", true
	case ".css":
		return "text/css; charset=utf-8", true
	case ".svg":
		return "image/svg+xml", true
	}
	return "", false
}

type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console's files at paths relative to where it is
// mounted: "/" is the page, "/app.js" a script. Mount it with
// http.StripPrefix. It is safe for concurrent use.
type Handler struct {
	files map[string]file
}

// New reads the embedded files once.
func New() *Handler {
	h := &Handler{files: map[string]file{}}
	root, _ := fs.Sub(assets, "assets")
	_ = fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := contentType(path.Ext(p))
		if !ok {
			return nil
		}
		body, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		h.files["/"+p] = file{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	h.files["/"] = h.files["/index.html"]
	return h
}

// SetSecurityHeaders sets the headers every console response carries.
func SetSecurityHeaders(hdr http.Header) {
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
	hdr.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	SetSecurityHeaders(w.Header())
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	f, ok := h.files[r.URL.Path]
	if !ok || strings.Contains(r.URL.Path, "..") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", f.contentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", f.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
}
