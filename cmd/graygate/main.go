// Command graygate is a gray-release and A/B-testing gateway.
//
//	graygate serve    [--config FILE] [--listen ADDR] [--admin-listen ADDR] ...
//	graygate demo     start the gateway with built-in demo upstreams
//	graygate validate FILE
//	graygate version
//
// This file holds flags, wiring and signals only; routing lives in internal/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// version is set with -ldflags "-X main.version=…"; otherwise the VCS
// revision from the build info is shown.
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `graygate: a gray-release and A/B-testing gateway

Usage:
  graygate serve [flags]          run the gateway (graygate serve -h for flags)
  graygate demo [flags]           run the gateway with demo upstreams and print curl lines to try
  graygate validate [--config CONFIG] FILE
                                  check a config (YAML) or rule (JSON) file; every problem is printed with its path
  graygate version                print the version
  graygate rules list|get|put|delete|history|revert ...
  graygate rollback | resume | explain | status | diff KEY
                                  talk to a running gateway's admin API (see graygate rules -h)
  graygate rollout get|promote|pause|resume|abort|retry KEY [--watch] [--full]
                                  follow and steer a rule's rollout plan (see graygate rollout)
  graygate results KEY            an experiment's results: units, means, lift with its CI, p-values, SRM
  graygate register --store etcd://HOST:PORT/PREFIX --service NAME --addr HOST:PORT [--meta K=V]... [--ttl 10s]
                                  keep a service instance registered for discovery until stopped
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "serve":
		err = cmdServe(ctx, args[1:], stdout, stderr)
	case "demo":
		err = cmdDemo(ctx, args[1:], stdout, stderr)
	case "validate":
		err = cmdValidate(args[1:], stdout, stderr)
	case "version", "--version", "-v":
		err = cmdVersion(args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		if c, ok := clientCommands[args[0]]; ok {
			// What the admin API answers is printed escaped (safeWriter),
			// errors included.
			stdout, stderr = safeWriter{stdout}, safeWriter{stderr}
			err = c(ctx, args[1:], stdout, stderr)
			break
		}
		fmt.Fprintf(stderr, "graygate: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h: the flag package printed the command's usage
		}
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(stderr, "graygate:", err)
			return 2
		}
		if !errors.Is(err, errReported) {
			fmt.Fprintln(stderr, "graygate:", err)
		}
		return 1
	}
	return 0
}

// errReported means the command already printed its problems.
var errReported = errors.New("reported")

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// flagError is a command's answer to its flag set's parse error: -h or
// --help (flag.ErrHelp; the usage is printed) ends it with status 0, as
// rules --help does, and any other error is a usage error.
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return flag.ErrHelp
	}
	return usageError{err.Error()}
}

const versionUsage = `usage: graygate version
  print the version: the one set when it was built (-ldflags "-X main.version=…"),
  or else the VCS revision it was built from`

// cmdVersion prints the version, or with -h its usage. It takes no
// arguments; --reason, --limit and --before are refused as every command
// that does not take them refuses them.
func cmdVersion(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints the error once
	var reason, limit, before string
	registerScoped(fs, readOnly, &reason, &limit, &before)
	err := fs.Parse(interleave(fs, args))
	if errors.Is(err, flag.ErrHelp) || err == nil && fs.NArg() > 0 && isHelp(fs.Arg(0)) {
		fmt.Fprintln(stdout, versionUsage)
		return nil
	}
	if err != nil {
		return usageError{err.Error()}
	}
	if err := refuseFlags(fs, "version", readOnly); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("version takes no arguments, got %q", fs.Arg(0))}
	}
	fmt.Fprintln(stdout, "graygate", versionString())
	return nil
}

func versionString() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel (" + bi.GoVersion + ")"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev + " (" + bi.GoVersion + ")"
}

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}
