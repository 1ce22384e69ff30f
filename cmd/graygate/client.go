package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/graygate/graygate/internal/strict"
)

// clientCommands talk to a running gateway's admin API.
var clientCommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"rules": cmdRules,
	"rollback": func(ctx context.Context, a []string, o, e io.Writer) error {
		return cmdRollback(ctx, "rollback", a, o, e)
	},
	"resume": func(ctx context.Context, a []string, o, e io.Writer) error {
		return cmdRollback(ctx, "resume", a, o, e)
	},
	"rollout":  cmdRollout,
	"explain":  cmdExplain,
	"diff":     cmdDiff,
	"status":   cmdStatus,
	"results":  cmdResults,
	"register": cmdRegister,
}

// client is the admin API client shared by the CLI commands.
type client struct {
	addr, token, output, reason string
	limit, before               string // rules history's page, checked by historyQuery
	http                        *http.Client
	stdout, stderr              io.Writer
}

// cmdKind says which of the flags that only some commands take a client
// command takes. Every command parses them all, so that one given where
// it does not apply is refused by name (refuseFlags) instead of being
// sent, or ignored, without a word.
type cmdKind struct {
	changes bool // it changes rules: --reason is recorded with the change
	pages   bool // rules history: --limit and --before
}

var (
	readOnly = cmdKind{}
	changing = cmdKind{changes: true}
)

// changingCommands are the commands that take --reason, for its error.
const changingCommands = "rules put, delete and revert, rollback, resume, rollout promote, pause, resume, abort and retry"

func (c *client) register(fs *flag.FlagSet, kind cmdKind) {
	// The environment is read after parsing (fromEnv), not made the
	// flags' defaults: -h prints defaults, and the token is a secret.
	fs.StringVar(&c.addr, "admin", "", "admin API `ADDR` or URL (env GRAYGATE_ADMIN, default 127.0.0.1:9080)")
	fs.StringVar(&c.token, "token", "", "bearer `TOKEN` (env GRAYGATE_ADMIN_TOKEN)")
	fs.StringVar(&c.output, "o", "text", "output `FORMAT`: text or json")
	registerScoped(fs, kind, &c.reason, &c.limit, &c.before)
}

// fromEnv takes --admin and --token from GRAYGATE_ADMIN and
// GRAYGATE_ADMIN_TOKEN when they were not given.
func (c *client) fromEnv(fs *flag.FlagSet) {
	if !isSet(fs, "admin") {
		c.addr = os.Getenv("GRAYGATE_ADMIN")
	}
	if !isSet(fs, "token") {
		c.token = os.Getenv("GRAYGATE_ADMIN_TOKEN")
	}
}

// registerScoped registers --reason, --limit and --before on fs, and makes
// fs's -h list only those of them that kind takes.
func registerScoped(fs *flag.FlagSet, kind cmdKind, reason, limit, before *string) {
	fs.StringVar(reason, "reason", "", "change `REASON` recorded in the history")
	fs.StringVar(limit, "limit", "", fmt.Sprintf("print at most `N` versions (1 to %d), and the --before that shows the next ones", historyPageMax))
	fs.StringVar(before, "before", "", "print only the versions older than `VERSION`")
	hidden := map[string]bool{"reason": !kind.changes, "limit": !kind.pages, "before": !kind.pages}
	fs.Usage = func() {
		shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		shown.SetOutput(fs.Output())
		fs.VisitAll(func(f *flag.Flag) {
			if !hidden[f.Name] {
				shown.Var(f.Value, f.Name, f.Usage)
				shown.Lookup(f.Name).DefValue = f.DefValue
			}
		})
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
		shown.PrintDefaults()
	}
}

// refuseFlags refuses, naming it and its value, a flag given to command
// name that its kind does not take.
func refuseFlags(fs *flag.FlagSet, name string, kind cmdKind) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err != nil {
			return
		}
		switch {
		case f.Name == "reason" && !kind.changes:
			err = usageError{fmt.Sprintf("--reason %q: only applies to commands that change rules (%s); %s changes nothing", f.Value, changingCommands, name)}
		case (f.Name == "limit" || f.Name == "before") && !kind.pages:
			err = usageError{fmt.Sprintf("--%s %q: only applies to rules history, not to %s", f.Name, f.Value, name)}
		}
	})
	return err
}

// isSet reports whether flag name was given, even as "".
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// historyPageMax is the admin API's largest history page (limit 1 to
// 1000, internal/admin's maxHistoryPage); --limit is checked against it
// before anything is sent.
const historyPageMax = 1000

// historyQuery turns rules history's --limit and --before into the
// history's query, refusing a value the admin API would.
func (c *client) historyQuery(fs *flag.FlagSet) (string, error) {
	q := url.Values{}
	if isSet(fs, "limit") {
		n, err := strconv.Atoi(c.limit)
		if err != nil || n < 1 || n > historyPageMax {
			return "", usageError{fmt.Sprintf("--limit must be a whole number from 1 to %d, got %q", historyPageMax, c.limit)}
		}
		q.Set("limit", strconv.Itoa(n))
	}
	if isSet(fs, "before") {
		n, err := strconv.ParseInt(c.before, 10, 64)
		if err != nil || n < 1 {
			return "", usageError{fmt.Sprintf("--before must be a version number >= 1, got %q", c.before)}
		}
		q.Set("before", strconv.FormatInt(n, 10))
	}
	if len(q) == 0 {
		return "", nil
	}
	return "?" + q.Encode(), nil
}

// rulePath is the admin API path of the rule key: the key escaped, so
// that a mistyped one ("a?b", "a#") is refused by the API as an invalid
// key instead of being cut at the "?" or "#" into another rule's path:
// "rules delete a#" must never delete rule a.
func rulePath(key string) string {
	return "/api/v1/rules/" + url.PathEscape(key)
}

func (c *client) base() string {
	a := c.addr
	if a == "" {
		a = "127.0.0.1:9080"
	}
	if !strings.Contains(a, "://") {
		a = "http://" + a
	}
	return strings.TrimRight(a, "/")
}

// apiError is an error answer from the admin API, printed with every detail.
type apiError struct {
	Status  int
	Message string `json:"error"`
	Details []struct {
		Path    string `json:"path"`
		Message string `json:"message"`
	} `json:"details"`
}

func (e *apiError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (HTTP %d)", e.Message, e.Status)
	for _, d := range e.Details {
		if d.Path != "" {
			fmt.Fprintf(&b, "\n  %s: %s", d.Path, d.Message)
		} else {
			fmt.Fprintf(&b, "\n  %s", d.Message)
		}
	}
	return b.String()
}

// do sends a request and decodes the JSON answer into out (raw JSON too).
func (c *client) do(ctx context.Context, method, path string, body []byte, hdr map[string]string) (json.RawMessage, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, rd)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.reason != "" {
		req.Header.Set("X-Change-Reason", c.reason)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API %s: %w", c.base(), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		ae := &apiError{Status: resp.StatusCode}
		if json.Unmarshal(raw, ae) != nil || ae.Message == "" {
			ae.Message = strings.TrimSpace(string(raw))
		}
		return nil, ae
	}
	if len(bytes.TrimSpace(raw)) > 0 && !json.Valid(raw) {
		// Not the admin API: most likely --admin names the data plane,
		// whose upstream answered.
		snippet := strings.TrimSpace(string(raw))
		if len(snippet) > 80 {
			snippet = snippet[:80] + "..."
		}
		what := strconv.Quote(snippet)
		if ct := resp.Header.Get("Content-Type"); ct != "" {
			what += " (" + ct + ")"
		}
		return nil, fmt.Errorf("admin API %s: %s %s answered %d with %s, not JSON: is %s the admin listener (admin_listen)?",
			c.base(), method, path, resp.StatusCode, what, c.base())
	}
	return raw, nil
}

func (c *client) printJSON(raw json.RawMessage) {
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		buf.Write(raw)
	}
	fmt.Fprintln(c.stdout, strings.TrimSpace(buf.String()))
}

// newClient parses a client command's flags: the shared ones, those kind
// takes, and extra's.
func newClient(name string, kind cmdKind, args []string, stdout, stderr io.Writer, extra func(*flag.FlagSet)) (*client, *flag.FlagSet, error) {
	c := &client{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs, kind)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(interleave(fs, args)); err != nil {
		return nil, nil, flagError(err)
	}
	if err := refuseFlags(fs, name, kind); err != nil {
		return nil, nil, err
	}
	c.fromEnv(fs)
	if c.output != "text" && c.output != "json" {
		return nil, nil, usageError{fmt.Sprintf("-o must be text or json, got %q", c.output)}
	}
	return c, fs, nil
}

// interleave moves flags after positional arguments to the front, so that
// "rules get KEY -o json" works like "rules get -o json KEY".
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if f := fs.Lookup(name); f != nil {
				if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
					continue
				}
				if i+1 == len(args) {
					// The last argument is a flag that needs a value and
					// has none. Moved before the positional arguments it
					// would take the first of them as its value:
					// "rollback KEY --reason" would roll back every rule
					// with the reason KEY. Left last, it is the flag
					// package's "flag needs an argument".
					return flags
				}
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

const rulesUsage = `usage: graygate rules COMMAND [flags]
  list                         list rules with version and who changed them last
  get KEY                      show one rule
  put -f FILE [--if-match N]   create or replace the rule(s) in FILE (a rule, or a list); KEY is taken from the file
  delete KEY [--if-match N]    delete a rule (its history is kept)
  history KEY [--limit N] [--before VERSION]
                               versions with who, when, why and a diff, newest first (all of them by default);
                               --limit N (1 to 1000) prints N and, while older ones remain, a last line
                               "more: --before V": add it for the next page; --before VERSION: only older ones
  revert KEY VERSION           restore VERSION as a new version
flags for every command: --admin ADDR --token TOKEN -o text|json
--reason TEXT, recorded in the history: put, delete and revert (the commands that change rules) only`

// rulesKinds are the rules commands, and the flags each takes.
var rulesKinds = map[string]cmdKind{
	"list": readOnly, "get": readOnly, "history": {pages: true},
	"put": changing, "delete": changing, "revert": changing,
}

func cmdRules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{rulesUsage}
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, rulesUsage)
		return nil
	}
	sub := args[0]
	kind, ok := rulesKinds[sub]
	if !ok {
		return usageError{rulesUsage}
	}
	var file string
	var ifMatch int64 = -1
	var dryRun bool
	c, fs, err := newClient("rules "+sub, kind, args[1:], stdout, stderr, func(fs *flag.FlagSet) {
		if sub == "put" {
			fs.StringVar(&file, "f", "", "rule `FILE` (JSON; - for stdin)")
			fs.BoolVar(&dryRun, "dry-run", false, "validate only")
		}
		if sub == "put" || sub == "delete" {
			fs.Int64Var(&ifMatch, "if-match", -1, "only change the rule if its current `VERSION` is this")
		}
	})
	if err != nil {
		return err
	}
	pos := fs.Args()
	need := func(n int, what string) error {
		if len(pos) != n {
			return usageError{fmt.Sprintf("rules %s takes %s", sub, what)}
		}
		return nil
	}
	switch sub {
	case "list":
		if len(pos) > 0 {
			return usageError{fmt.Sprintf("rules list takes no arguments, got %q", pos[0])}
		}
		raw, err := c.do(ctx, "GET", "/api/v1/rules", nil, nil)
		if err != nil {
			return err
		}
		if c.output == "json" {
			c.printJSON(raw)
			return nil
		}
		var list struct {
			Revision   int64            `json:"revision"`
			RolledBack bool             `json:"rolled_back"`
			Rules      []map[string]any `json:"rules"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tTYPE\tSPLIT\tVERSION\tUPDATED\tBY\tROLLED BACK")
		for _, r := range list.Rules {
			fmt.Fprintf(tw, "%v\t%v\t%s\t%v\t%v\t%v\t%v\n", r["key"], r["type"], split(r), r["version"], r["updated_at"], r["updated_by"], r["rolled_back"])
		}
		tw.Flush()
		fmt.Fprintf(stdout, "revision %d, %d rule(s), global rollback %v\n", list.Revision, len(list.Rules), list.RolledBack)
		return nil
	case "get":
		if err := need(1, "KEY"); err != nil {
			return err
		}
		raw, err := c.do(ctx, "GET", rulePath(pos[0]), nil, nil)
		if err != nil {
			return err
		}
		c.printJSON(raw)
		return nil
	case "put":
		if file == "" {
			return usageError{"rules put needs -f FILE"}
		}
		data, err := readFileOrStdin(file)
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(data)) == 0 {
			return fmt.Errorf("%s is empty: want a rule, a list of rules or {\"rules\": [...]}; nothing was sent", file)
		}
		raws, err := splitRules(data)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if len(raws) == 0 {
			return fmt.Errorf("%s holds no rules; nothing was sent", file)
		}
		if len(pos) > 1 || len(pos) == 1 && len(raws) > 1 {
			return usageError{fmt.Sprintf("rules put takes -f FILE, and a KEY only for a file of one rule; got %q for %d rule(s)", pos, len(raws))}
		}
		keys := make([]string, len(raws))
		first := map[string]int{}
		for i, raw := range raws {
			if !json.Valid(raw) {
				var v any
				return fmt.Errorf("%s: %w; nothing was sent", file, strict.Decode(raw, &v))
			}
			var probe struct {
				Key string `json:"key"`
			}
			_ = json.Unmarshal(raw, &probe)
			keys[i] = probe.Key
			if len(pos) == 1 && len(raws) == 1 {
				keys[i] = pos[0]
			}
			if keys[i] == "" {
				return fmt.Errorf("%s: rule %d has no \"key\"", file, i)
			}
			// Sent one after the other, the second would silently
			// replace the first, as two versions of one rule.
			if j, dup := first[keys[i]]; dup {
				return fmt.Errorf("%s: rules %d and %d are both rule %q; nothing was sent", file, j, i, keys[i])
			}
			first[keys[i]] = i
		}
		hdr := map[string]string{}
		if ifMatch >= 0 {
			hdr["If-Match"] = strconv.FormatInt(ifMatch, 10)
		}
		if len(raws) > 1 && !dryRun {
			// A file of several rules is checked whole first (dry runs),
			// so that one bad rule leaves the store as it was instead of
			// half written.
			var bad []error
			for i, raw := range raws {
				if _, err := c.do(ctx, "PUT", rulePath(keys[i])+"?dry_run=1", raw, hdr); err != nil {
					bad = append(bad, ruleError(keys[i], err))
				}
			}
			if len(bad) > 0 {
				return fmt.Errorf("%w\nnothing was saved (%d of %d rules refused)", errors.Join(bad...), len(bad), len(raws))
			}
		}
		for i, raw := range raws {
			key := keys[i]
			q := ""
			if dryRun {
				q = "?dry_run=1"
			}
			out, err := c.do(ctx, "PUT", rulePath(key)+q, raw, hdr)
			if err != nil {
				if i > 0 && !dryRun {
					return fmt.Errorf("%w\nsaved before it: %s; not attempted: %s", ruleError(key, err), strings.Join(keys[:i], ", "), orNone(keys[i+1:]))
				}
				return ruleError(key, err)
			}
			if c.output == "json" {
				c.printJSON(out)
				continue
			}
			var e map[string]any
			_ = json.Unmarshal(out, &e)
			if dryRun {
				fmt.Fprintf(stdout, "rule %s is valid (dry run, nothing changed)\n", key)
			} else {
				fmt.Fprintf(stdout, "rule %s saved: version %v, revision %v\n", key, e["version"], e["revision"])
			}
		}
		return nil
	case "delete":
		if err := need(1, "KEY"); err != nil {
			return err
		}
		hdr := map[string]string{}
		if ifMatch >= 0 {
			hdr["If-Match"] = strconv.FormatInt(ifMatch, 10)
		}
		raw, err := c.do(ctx, "DELETE", rulePath(pos[0]), nil, hdr)
		if err != nil {
			return err
		}
		if c.output == "json" {
			c.printJSON(raw)
			return nil
		}
		fmt.Fprintf(stdout, "rule %s deleted (its history is kept)\n", pos[0])
		return nil
	case "history":
		if err := need(1, "KEY"); err != nil {
			return err
		}
		query, err := c.historyQuery(fs)
		if err != nil {
			return err
		}
		raw, err := c.do(ctx, "GET", rulePath(pos[0])+"/history"+query, nil, nil)
		if err != nil {
			return err
		}
		if c.output == "json" {
			c.printJSON(raw) // next_before, when there is one, is in it
			return nil
		}
		var h struct {
			NextBefore *int64 `json:"next_before"`
			History    []struct {
				Version int64     `json:"version"`
				Op      string    `json:"op"`
				At      time.Time `json:"at"`
				By      string    `json:"by"`
				Reason  string    `json:"reason"`
				Diff    []struct {
					Path   string `json:"path"`
					Op     string `json:"op"`
					Before any    `json:"before"`
					After  any    `json:"after"`
				} `json:"diff"`
			} `json:"history"`
		}
		if err := json.Unmarshal(raw, &h); err != nil {
			return err
		}
		for _, v := range h.History {
			reason := ""
			if v.Reason != "" {
				reason = "  “" + v.Reason + "”"
			}
			fmt.Fprintf(stdout, "v%d  %-8s %s  by %s%s\n", v.Version, v.Op, v.At.UTC().Format(time.RFC3339), v.By, reason)
			for _, d := range v.Diff {
				if d.Path == "" {
					d.Path = "(rule)"
				}
				switch d.Op {
				case "changed":
					fmt.Fprintf(stdout, "      ~ %s: %s → %s\n", d.Path, compact(d.Before), compact(d.After))
				case "added":
					fmt.Fprintf(stdout, "      + %s: %s\n", d.Path, compact(d.After))
				case "removed":
					fmt.Fprintf(stdout, "      - %s: %s\n", d.Path, compact(d.Before))
				}
			}
		}
		if len(h.History) == 0 && isSet(fs, "before") {
			// The API answers 404 for a rule with no history at all; an
			// empty page is a --before at or below its oldest version.
			fmt.Fprintf(stdout, "rule %s has no versions older than %s\n", pos[0], c.before)
		}
		if h.NextBefore != nil {
			fmt.Fprintf(stdout, "more: --before %d\n", *h.NextBefore)
		}
		return nil
	case "revert":
		if err := need(2, "KEY VERSION"); err != nil {
			return err
		}
		v, err := strconv.ParseInt(pos[1], 10, 64)
		if err != nil {
			return usageError{fmt.Sprintf("VERSION must be a number, got %q", pos[1])}
		}
		body, _ := json.Marshal(map[string]int64{"version": v})
		raw, err := c.do(ctx, "POST", rulePath(pos[0])+"/revert", body, nil)
		if err != nil {
			return err
		}
		if c.output == "json" {
			c.printJSON(raw)
			return nil
		}
		var e map[string]any
		_ = json.Unmarshal(raw, &e)
		fmt.Fprintf(stdout, "rule %s reverted to version %d: now version %v\n", pos[0], v, e["version"])
		return nil
	}
	return usageError{rulesUsage}
}

func split(r map[string]any) string {
	if r["type"] == "gray" {
		return fmt.Sprintf("%v%% gray", r["gray_percent"])
	}
	gs, _ := r["groups"].([]any)
	var parts []string
	for _, g := range gs {
		m, _ := g.(map[string]any)
		parts = append(parts, fmt.Sprintf("%v:%v", m["name"], m["weight"]))
	}
	return strings.Join(parts, " ")
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func readFileOrStdin(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(name)
}

func cmdRollback(ctx context.Context, what string, args []string, stdout, stderr io.Writer) error {
	c, fs, err := newClient(what, changing, args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	path := "/api/v1/" + what
	target := "every rule"
	switch fs.NArg() {
	case 0:
	case 1:
		path = rulePath(fs.Arg(0)) + "/" + what
		target = "rule " + fs.Arg(0)
	default:
		return usageError{what + " takes at most one KEY"}
	}
	raw, err := c.do(ctx, "POST", path, []byte("{}"), nil)
	if err != nil {
		return err
	}
	if c.output == "json" {
		c.printJSON(raw)
		return nil
	}
	if what == "rollback" {
		fmt.Fprintf(stdout, "rolled back %s: gray traffic goes to stable, experiments to their control group\n", target)
	} else {
		fmt.Fprintf(stdout, "resumed %s: rules route as written again\n", target)
	}
	return nil
}

// kvFlag collects repeated K=V flags.
type kvFlag map[string]string

func (k kvFlag) String() string { return "" }
func (k kvFlag) Set(s string) error {
	key, v, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	k[key] = v
	return nil
}

func cmdExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	req := struct {
		Method     string            `json:"method"`
		Host       string            `json:"host,omitempty"`
		Path       string            `json:"path"`
		Headers    map[string]string `json:"headers"`
		Cookies    map[string]string `json:"cookies"`
		Query      map[string]string `json:"query"`
		RemoteAddr string            `json:"remote_addr,omitempty"`
	}{Headers: kvFlag{}, Cookies: kvFlag{}, Query: kvFlag{}}
	var uid string
	c, fs, err := newClient("explain", readOnly, args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&uid, "user-id", "", "user `ID` (sent as X-User-Id)")
		fs.StringVar(&req.Path, "path", "/", "request `PATH`")
		fs.StringVar(&req.Method, "method", "GET", "request `METHOD`")
		fs.StringVar(&req.Host, "host", "", "request `HOST`")
		fs.StringVar(&req.RemoteAddr, "remote-addr", "", "the TCP peer's `IP` (with --header X-Forwarded-For=..., the client behind a trusted proxy)")
		fs.Var(kvFlag(req.Headers), "header", "request header `K=V` (repeatable)")
		fs.Var(kvFlag(req.Cookies), "cookie", "cookie `K=V` (repeatable)")
		fs.Var(kvFlag(req.Query), "query", "query argument `K=V` (repeatable)")
	})
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"explain takes flags only"}
	}
	if uid != "" {
		req.Headers["X-User-Id"] = uid
	}
	body, _ := json.Marshal(req)
	raw, err := c.do(ctx, "POST", "/api/v1/explain", body, nil)
	if err != nil {
		return err
	}
	if c.output == "json" {
		c.printJSON(raw)
		return nil
	}
	var ex struct {
		Revision int64 `json:"revision"`
		Decision struct {
			Route, Rule, Group, Target, Tag, Degraded string
			UserID                                    string `json:"user_id"`
			Source                                    string `json:"identity_source"`
			Reject                                    string `json:"reject"`
		} `json:"decision"`
		Trace struct {
			Colored        string   `json:"colored"`
			IgnoredColor   string   `json:"ignored_color"`
			ClientIP       string   `json:"client_ip"`
			PeerTrusted    bool     `json:"peer_trusted"`
			SkippedByIndex []string `json:"skipped_by_index"`
			Rules          []struct {
				Key, Type, Hash, Reason string
				Priority                int
				Conditions              []struct {
					Condition string   `json:"condition"`
					Want      []string `json:"want"`
					Got       string   `json:"got"`
					Matched   bool     `json:"matched"`
				} `json:"conditions"`
			} `json:"rules"`
			Reason string `json:"reason"`
		} `json:"trace"`
	}
	if err := json.Unmarshal(raw, &ex); err != nil {
		return err
	}
	d := ex.Decision
	if d.Reject != "" {
		// Refused before any rule: no group, no upstream.
		fmt.Fprintf(stdout, "refused with 400: %s", d.Reject)
	} else {
		fmt.Fprintf(stdout, "user %q (from %s) → group %s, upstream %s", d.UserID, d.Source, d.Group, d.Target)
	}
	if d.Rule != "" {
		fmt.Fprintf(stdout, ", rule %s", d.Rule)
	}
	if d.Degraded != "" {
		fmt.Fprintf(stdout, ", degraded: %s", d.Degraded)
	}
	fmt.Fprintf(stdout, "\n  %s (revision %d)\n", ex.Trace.Reason, ex.Revision)
	if ex.Trace.ClientIP != "" {
		peer := "not a trusted proxy: its X-Forwarded-For, region and tag headers are ignored"
		if ex.Trace.PeerTrusted {
			peer = "a trusted proxy"
		}
		fmt.Fprintf(stdout, "  client %s; the peer is %s\n", ex.Trace.ClientIP, peer)
	}
	if ex.Trace.IgnoredColor != "" {
		fmt.Fprintf(stdout, "  X-Gray-Tag %q ignored: the peer is not in trusted_proxies\n", ex.Trace.IgnoredColor)
	}
	for _, r := range ex.Trace.Rules {
		fmt.Fprintf(stdout, "  - %s (%s, priority %d, %s): %s\n", r.Key, r.Type, r.Priority, r.Hash, r.Reason)
		for _, cnd := range r.Conditions {
			mark := "✓"
			if !cnd.Matched {
				mark = "✗"
			}
			fmt.Fprintf(stdout, "      %s %s %v, got %q\n", mark, cnd.Condition, cnd.Want, cnd.Got)
		}
	}
	if len(ex.Trace.SkippedByIndex) > 0 {
		fmt.Fprintf(stdout, "  not evaluated (the path index rules them out): %s\n", strings.Join(ex.Trace.SkippedByIndex, ", "))
	}
	return nil
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, fs, err := newClient("status", readOnly, args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("status takes no arguments, got %q", fs.Arg(0))}
	}
	raw, err := c.do(ctx, "GET", "/api/v1/status", nil, nil)
	if err != nil {
		return err
	}
	if c.output == "json" {
		c.printJSON(raw)
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	// One line per field; an object's fields (store: kind, state, since,
	// revision) get lines of their own, as store.kind.
	flat := map[string]any{}
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 && k != "broken_rules" {
			for sk, sv := range sub {
				flat[k+"."+sk] = sv
			}
			continue
		}
		flat[k] = v
	}
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := flat[k]
		if str, ok := v.(string); ok {
			fmt.Fprintf(stdout, "%-20s %s\n", k+":", str)
			continue
		}
		fmt.Fprintf(stdout, "%-20s %s\n", k+":", compact(v))
	}
	return nil
}

// orNone joins keys with commas, or says "none".
func orNone(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}

// isHelp reports an argument that asks for a command's usage.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

// ruleError names rule key in err, unless the gateway's answer does.
func ruleError(key string, err error) error {
	if strings.Contains(err.Error(), strconv.Quote(key)) {
		return err
	}
	return fmt.Errorf("rule %q: %w", key, err)
}
