// Command benchup is the benchmark's helper: the tiny upstream every proxy
// forwards to, a split checker run before each measurement, an open-loop
// load generator for the fixed-rate latency run, and the report writer that
// turns the harness's raw TSV rows into bench/results.md, and a minimal
// fasthttp proxy to compare graygate with.
//
//	benchup serve  -stable 127.0.0.1:19001 -gray 127.0.0.1:19002
//	benchup check  -url http://127.0.0.1:18080/api/x -n 2000 [-vip uid]
//	benchup pace   -url http://127.0.0.1:18080/api/x -rate 20000 -duration 10s
//	benchup hiccup -duration 1s
//	benchup minproxy -listen 127.0.0.1:18080 -stable ... -gray ...
//	benchup report -runs runs.tsv -latency latency.tsv -scaling scaling.txt -meta meta.txt
//
// It lives in its own module (bench/upstream) so that the main module's
// go.mod is never touched by the benchmark.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchup serve|check|pace|hiccup|minproxy|report [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "check":
		err = check(os.Args[2:])
	case "pace":
		err = pace(os.Args[2:])
	case "hiccup":
		err = hiccup(os.Args[2:])
	case "minproxy":
		err = minproxy(os.Args[2:])
	case "report":
		err = report(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchup:", err)
		os.Exit(1)
	}
}
