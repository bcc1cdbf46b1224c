package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/crashloop-harness/crashloop/pkg/timeline"
)

// series is one line of a panel: y against the herd's size.
type series struct {
	Name, Color string
	Dashed      bool
	X, Y        []float64
}

// panel is one chart of the plot.
type panel struct {
	Title, YLabel string
	Series        []series
}

const (
	panelW, panelH = 420.0, 300.0
	marginL        = 60.0
	marginB        = 40.0
	marginT        = 30.0
)

// writeHerdPlot draws lateness (p50 dashed, p99 solid) and request rate
// against N for both controllers, side by side, as SVG.
func writeHerdPlot(w io.Writer, rs []result) error {
	sortResults(rs)
	late := panel{Title: "retry lateness vs planned time", YLabel: "ms"}
	reqs := panel{Title: "requests/s (ours: state saves/s)", YLabel: "per second"}
	colors := map[string]string{"kubevirt": "#c0392b", "ours": "#2471a3"}
	byCtl := map[string][]result{}
	var names []string
	for _, r := range rs {
		if _, ok := byCtl[r.Controller]; !ok {
			names = append(names, r.Controller)
		}
		byCtl[r.Controller] = append(byCtl[r.Controller], r)
	}
	for _, name := range names {
		c := colors[name]
		if c == "" {
			c = "#7d3c98"
		}
		var x, p50, p99, all, writes []float64
		for _, r := range byCtl[name] {
			x = append(x, float64(r.VMs))
			p50 = append(p50, float64(r.Lateness.P50)/1e6)
			p99 = append(p99, float64(r.Lateness.P99)/1e6)
			all = append(all, r.Requests)
			writes = append(writes, r.Writes)
		}
		late.Series = append(late.Series, series{name + " p99", c, false, x, p99}, series{name + " p50", c, true, x, p50})
		if name == "kubevirt" {
			reqs.Series = append(reqs.Series, series{name + " all", c, false, x, all})
		}
		reqs.Series = append(reqs.Series, series{name + " writes", c, true, x, writes})
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", 2*panelW, panelH)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	for i, p := range []panel{late, reqs} {
		drawPanel(&b, float64(i)*panelW, p)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// drawPanel draws p with its left edge at x0: axes, ticks, a line per
// series and a legend.
func drawPanel(b *strings.Builder, x0 float64, p panel) {
	var xs []float64
	ymax := 0.0
	for _, s := range p.Series {
		xs = append(xs, s.X...)
		for _, y := range s.Y {
			ymax = math.Max(ymax, y)
		}
	}
	xs = uniq(xs)
	ymax = timeline.NiceCeil(ymax)
	plotW, plotH := panelW-marginL-20, panelH-marginT-marginB
	px := func(i int) float64 { // points evenly spaced by the order of N
		if len(xs) < 2 {
			return x0 + marginL + plotW/2
		}
		return x0 + marginL + plotW*float64(i)/float64(len(xs)-1)
	}
	py := func(y float64) float64 { return marginT + plotH*(1-y/ymax) }
	fmt.Fprintf(b, `<text x="%.0f" y="18" font-size="13">%s</text>`+"\n", x0+marginL, p.Title)
	fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", x0+marginL, marginT, x0+marginL, marginT+plotH)
	fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", x0+marginL, marginT+plotH, x0+marginL+plotW, marginT+plotH)
	for k := 0; k <= 4; k++ {
		y := ymax * float64(k) / 4
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", x0+marginL-4, py(y)+4, timeline.TrimFloat(y))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" transform="rotate(-90 %.0f %.0f)">%s</text>`+"\n", x0+14, marginT+plotH/2, x0+14, marginT+plotH/2, p.YLabel)
	for i, x := range xs {
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", px(i), marginT+plotH+14, timeline.TrimFloat(x))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle">VMs in the herd</text>`+"\n", x0+marginL+plotW/2, marginT+plotH+30)
	for si, s := range p.Series {
		var pts []string
		for j, x := range s.X {
			i := sort.SearchFloat64s(xs, x)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(i), py(s.Y[j])))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(i), py(s.Y[j]), s.Color)
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="5,4"`
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.Color, dash)
		ly := marginT + 6 + float64(si)*14
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="2"%s/>`+"\n", x0+marginL+10, ly, x0+marginL+30, ly, s.Color, dash)
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", x0+marginL+34, ly+4, s.Name)
	}
}

// uniq sorts xs and drops repeats.
func uniq(xs []float64) []float64 {
	sort.Float64s(xs)
	var out []float64
	for _, x := range xs {
		if len(out) == 0 || out[len(out)-1] != x {
			out = append(out, x)
		}
	}
	return out
}
