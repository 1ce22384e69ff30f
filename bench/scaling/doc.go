// Package scaling holds the decision-time and memory benchmarks behind the
// scaling curve of bench/scaling.png: how long router.Snapshot.Decide takes,
// how much it allocates, and how much heap the compiled snapshot holds as
// the rule count grows (1 to 10,000 rules, spread over paths or routes, or
// unindexable) and as a whitelist grows (1,000 to 1,000,000 entries).
//
// It is a package of the main module only so that it may import
// internal/rule and internal/router; it has no non-test code. bench/run.sh
// runs it with
//
//	go test -run '^$' -bench . -benchmem ./bench/scaling
//
// and bench/tools/plotscaling draws the curve from that output. Each
// benchmark reports the snapshot's heap as the custom metric heap-B: the
// live heap (runtime.MemStats.HeapAlloc after a GC) after building minus
// before.
package scaling
