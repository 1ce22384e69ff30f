// Command plotscaling draws bench/scaling.png from the output of the
// bench/scaling benchmarks (go test -bench, possibly with -count > 1, in
// which case each point is the median):
//
//	go test -run '^$' -bench . -benchmem ./bench/scaling > scaling.txt
//	plotscaling -in scaling.txt -out bench/scaling.png
//
// Four panels: decision time and snapshot heap against the rule count (one
// line per layout: paths, routes, unindexed), and the same two against the
// whitelist size (hit and miss).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// line matches "BenchmarkDecideRules/paths/n=100-2  123  181.2 ns/op  670448 heap-B ...".
var line = regexp.MustCompile(`^Benchmark(DecideRules|Whitelist)/(?:(\w+)/)?n=(\d+)(?:/(\w+))?(?:-\d+)?\s+\d+\s+(.*)$`)

type point struct{ ns, heap []float64 }

// series is keyed by "rules/<layout>" or "whitelist/<hit|miss>", then by n.
type series map[string]map[int]*point

func main() {
	in := flag.String("in", "", "benchmark output `FILE` (default stdin)")
	out := flag.String("out", "scaling.png", "PNG `FILE` to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "plotscaling:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	f := os.Stdin
	if in != "" {
		var err error
		if f, err = os.Open(in); err != nil {
			return err
		}
		defer f.Close()
	}
	s := series{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := line.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		var key string
		if m[1] == "DecideRules" {
			key = "rules/" + m[2]
		} else {
			key = "whitelist/" + m[4]
		}
		n, _ := strconv.Atoi(m[3])
		if s[key] == nil {
			s[key] = map[int]*point{}
		}
		p := s[key][n]
		if p == nil {
			p = &point{}
			s[key][n] = p
		}
		fs := strings.Fields(m[5])
		for i := 0; i+1 < len(fs); i += 2 {
			v, err := strconv.ParseFloat(fs[i], 64)
			if err != nil {
				continue
			}
			switch fs[i+1] {
			case "ns/op":
				p.ns = append(p.ns, v)
			case "heap-B":
				p.heap = append(p.heap, v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(s) == 0 {
		return fmt.Errorf("no bench/scaling benchmark lines in the input")
	}
	rulesTime := panel("Decision time vs rule count", "rules", "ns per decision (log)", true)
	rulesHeap := panel("Snapshot heap vs rule count", "rules", "MiB of live heap (log)", true)
	wlTime := panel("Decision time vs whitelist size", "whitelist entries (1,000,000 = 10 rules of 100,000)", "ns per decision (log)", true)
	wlHeap := panel("Snapshot heap vs whitelist size", "whitelist entries (1,000,000 = 10 rules of 100,000)", "MiB of live heap (log)", true)
	ruleNames := map[string]string{"paths": "over paths (indexed)", "routes": "over routes (indexed)", "unindexed": "unindexed (linear scan)"}
	for i, l := range []string{"paths", "routes", "unindexed"} {
		add(rulesTime, s["rules/"+l], ruleNames[l], i, func(p *point) float64 { return median(p.ns) })
		add(rulesHeap, s["rules/"+l], l, i, func(p *point) float64 { return median(p.heap) / (1 << 20) })
	}
	for i, l := range []string{"hit", "miss"} {
		add(wlTime, s["whitelist/"+l], "whitelist "+l, i, func(p *point) float64 { return median(p.ns) })
		add(wlHeap, s["whitelist/"+l], "whitelist "+l, i, func(p *point) float64 { return median(p.heap) / (1 << 20) })
	}
	// A reference line at the 1 µs decision target.
	for _, p := range []*plot.Plot{rulesTime, wlTime} {
		ref, _ := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: 1000}, {X: p.X.Max, Y: 1000}})
		ref.Color = color.Gray{Y: 120}
		ref.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(ref)
		p.Legend.Add("1 µs target", ref)
	}

	img := vgimg.New(12*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Inch / 3, PadY: vg.Inch / 3, PadTop: vg.Inch / 6, PadBottom: vg.Inch / 6, PadLeft: vg.Inch / 6, PadRight: vg.Inch / 6}
	plots := [][]*plot.Plot{{rulesTime, rulesHeap}, {wlTime, wlHeap}}
	canvases := plot.Align(plots, tiles, dc)
	for r := range plots {
		for c := range plots[r] {
			plots[r][c].Draw(canvases[r][c])
		}
	}
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

func panel(title, x, y string, logY bool) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x + " (log)"
	p.Y.Label.Text = y
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
}

func add(p *plot.Plot, pts map[int]*point, name string, i int, y func(*point) float64) {
	ns := make([]int, 0, len(pts))
	for n := range pts {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	var xys plotter.XYs
	for _, n := range ns {
		v := y(pts[n])
		if math.IsNaN(v) || v <= 0 {
			continue
		}
		xys = append(xys, plotter.XY{X: float64(n), Y: v})
	}
	if len(xys) == 0 {
		return
	}
	l, sc, err := plotter.NewLinePoints(xys)
	if err != nil {
		return
	}
	l.Color, sc.Color = palette[i%len(palette)], palette[i%len(palette)]
	l.Width = vg.Points(1.5)
	sc.Shape = draw.CircleGlyph{}
	p.Add(l, sc)
	p.Legend.Add(name, l, sc)
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: valueLabels(xys)})
	if err == nil {
		for j := range labels.TextStyle {
			labels.TextStyle[j].Color = palette[i%len(palette)]
			labels.TextStyle[j].Font.Size = vg.Points(7)
		}
		labels.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(2)}
		p.Add(labels)
	}
}

func valueLabels(xys plotter.XYs) []string {
	out := make([]string, len(xys))
	for i, xy := range xys {
		switch {
		case xy.Y >= 100:
			out[i] = strconv.FormatFloat(xy.Y, 'f', 0, 64)
		case xy.Y >= 10:
			out[i] = strconv.FormatFloat(xy.Y, 'f', 1, 64)
		default:
			out[i] = strconv.FormatFloat(xy.Y, 'g', 2, 64)
		}
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	v := slices.Clone(xs)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
