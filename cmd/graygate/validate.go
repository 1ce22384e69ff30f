package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/graygate/graygate/internal/admin"
	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/upstream"
)

func cmdValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config `FILE` whose upstreams and routes rule targets may name")
	kind := fs.String("kind", "", "`KIND`: rule or config; by default .json files are rules and others configs")
	if err := fs.Parse(interleave(fs, args)); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 1 {
		return usageError{"validate takes exactly one FILE"}
	}
	path := fs.Arg(0)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	k := *kind
	if k == "" {
		k = "config"
		if strings.EqualFold(filepath.Ext(path), ".json") {
			k = "rule"
		}
	}
	var problems error
	var summary string
	switch k {
	case "config":
		cfg, err := config.Parse(data)
		problems = err
		if err == nil {
			problems = validateRules(cfg, cfg.Rules, "rules")
			summary = fmt.Sprintf("%s: valid config (%d upstreams, %d routes, %d rules)", path, len(cfg.Upstreams), len(cfg.Routes), len(cfg.Rules))
		}
	case "rule":
		cfg, err := config.Parse(nil)
		if *cfgPath != "" {
			cfg, err = config.Load(*cfgPath)
		}
		if err != nil {
			return err
		}
		raws, err := splitRules(data)
		if err != nil {
			problems = err
			break
		}
		prefix := "rules"
		if len(raws) == 1 && !bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")) {
			prefix = "" // a single rule: paths are the rule's own
		}
		// A key given twice is refused as the admin API refuses it: PUT
		// would not take the file that validate passed.
		dups := strict.DuplicateKeys(data)
		if bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")) {
			dups = strict.Prefix("rules", dups)
		}
		// What `rules get -o json` prints (the rule with its version,
		// updated_by, reason, ...) is what PUT takes: the metadata is
		// stripped here as the admin API strips it.
		var meta []error
		for i, raw := range raws {
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) != nil || obj == nil {
				continue // not an object: the rule decoder says so
			}
			p := ""
			if prefix != "" {
				p = strict.Index(prefix, i)
			}
			if _, err := admin.StripMetadata(obj); err != nil {
				meta = append(meta, strict.Prefix(p, err))
			}
			raws[i], _ = json.Marshal(obj)
		}
		problems = errors.Join(dups, errors.Join(meta...), validateRules(cfg, raws, prefix))
		summary = fmt.Sprintf("%s: %d valid rule(s)", path, len(raws))
	default:
		return usageError{fmt.Sprintf("--kind must be rule or config, got %q", k)}
	}
	if problems != nil {
		fs := strict.Fields(problems)
		fmt.Fprintf(stdout, "%s: %d problem(s)\n", path, len(fs))
		for _, f := range fs {
			if f.Path == "" {
				fmt.Fprintf(stdout, "  %s\n", f.Message)
			} else {
				fmt.Fprintf(stdout, "  %s: %s\n", f.Path, f.Message)
			}
		}
		return errReported
	}
	fmt.Fprintln(stdout, summary)
	return nil
}

// splitRules accepts one rule, an array of rules, or {"rules": [...]}.
func splitRules(data []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var raws []json.RawMessage
		if err := strict.Decode(trimmed, &raws); err != nil {
			return nil, err
		}
		return raws, nil
	}
	var wrapper struct {
		Rules []json.RawMessage `json:"rules"`
	}
	if json.Unmarshal(trimmed, &wrapper) == nil && wrapper.Rules != nil {
		var probe map[string]json.RawMessage
		_ = json.Unmarshal(trimmed, &probe)
		if len(probe) == 1 {
			return wrapper.Rules, nil
		}
	}
	return []json.RawMessage{trimmed}, nil
}

// validateRules compiles raws against cfg and names every problem with its
// path below prefix.
func validateRules(cfg *config.Config, raws []json.RawMessage, prefix string) error {
	pools, err := cfg.Pools(nil, nil) // no health probes, no discovery while validating
	if err != nil {
		return err
	}
	reg := upstream.NewRegistry(pools)
	routes := map[string]bool{}
	for _, r := range cfg.Routes {
		routes[r.Name] = true
	}
	env := rule.Env{Resolve: reg.Resolve, HasRoute: func(n string) bool { return routes[n] }}
	var errs []error
	keys := map[string]int{}
	var compiled []*rule.Compiled
	for i, raw := range raws {
		p := ""
		if prefix != "" {
			p = strict.Index(prefix, i)
		}
		c, err := rule.Parse(raw, env)
		if err != nil {
			errs = append(errs, strict.Prefix(p, err))
			continue
		}
		if j, dup := keys[c.Key]; dup {
			errs = append(errs, strict.Errorf(strict.Join(p, "key"), "duplicates rules[%d].key %q", j, c.Key))
		}
		keys[c.Key] = i
		if err := rule.LayerConflicts(c, compiled); err != nil {
			errs = append(errs, strict.Prefix(p, err))
		}
		compiled = append(compiled, c)
	}
	return errors.Join(errs...)
}
