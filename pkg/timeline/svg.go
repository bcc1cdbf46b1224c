package timeline

import (
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// WriteSVG draws the retries: x is the failure count after which the VM
// waited, y the delay in seconds of wall time. For each count the envelope
// [Low, High] is a shaded band; each observed retry is a dot (red when it
// fell outside its band), its planned delay a short dash.
func (t *Timeline) WriteSVG(w io.Writer) error {
	p := newPlot(t)
	var b strings.Builder
	p.header(&b)
	p.axes(&b)
	p.bands(&b)
	p.marks(&b)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("writing SVG: %w", err)
	}
	return nil
}

// The chart's size and margins.
const (
	svgWidth, svgHeight                  = 760.0, 460.0
	svgLeft, svgRight, svgTop, svgBottom = 70.0, 20.0, 66.0, 60.0
	svgPlotW, svgPlotH                   = svgWidth - svgLeft - svgRight, svgHeight - svgTop - svgBottom
)

// plot is the timeline's retries and the chart's scales.
type plot struct {
	t        *Timeline
	retries  []Attempt
	observed int
	maxCount int
	maxY     float64
	slot     float64
}

// shown tells whether an attempt is a retry the chart draws.
func shown(a Attempt) bool { return a.FailCount != 0 && (a.Observed != 0 || a.Planned != 0) }

func newPlot(t *Timeline) *plot {
	p := &plot{t: t, maxCount: 1}
	for _, a := range t.Attempts {
		if !shown(a) {
			continue
		}
		p.retries = append(p.retries, a)
		if a.Observed > 0 {
			p.observed++
		}
		p.maxCount = max(p.maxCount, a.FailCount)
		p.maxY = math.Max(p.maxY, math.Max(a.High.Seconds(), math.Max(a.Observed.Seconds(), a.Planned.Seconds())))
	}
	if p.maxY == 0 {
		p.maxY = 1
	}
	p.maxY = niceCeil(p.maxY * 1.05)
	p.slot = svgPlotW / float64(p.maxCount)
	return p
}

func (p *plot) x(count float64) float64 { return svgLeft + (count-0.5)/float64(p.maxCount)*svgPlotW }
func (p *plot) y(sec float64) float64   { return svgTop + svgPlotH - sec/p.maxY*svgPlotH }

// header is the SVG element, its background, title and legend.
func (p *plot) header(b *strings.Builder) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", svgWidth, svgHeight, svgWidth, svgHeight)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := p.t.Title
	if title == "" {
		title = "crash-loop retries"
	}
	fmt.Fprintf(b, `<text x="%g" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", svgLeft, html.EscapeString(title))
	fmt.Fprintf(b, `<text x="%g" y="38" fill="#555">seed %d, time scale %g, %d observed retries. Band: KubeVirt's envelope for the failure count; dash: planned delay;</text>`+"\n",
		svgLeft, p.t.Seed, p.t.TimeScale, p.observed)
	fmt.Fprintf(b, `<text x="%g" y="52" fill="#555">dot: observed delay, green inside the band (within %v), red outside.</text>`+"\n", svgLeft, p.t.slack())
}

// axes are the axes, the grid and their labels.
func (p *plot) axes(b *strings.Builder) {
	left, top, plotW, plotH := svgLeft, svgTop, svgPlotW, svgPlotH
	fmt.Fprintf(b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, top+plotH, left+plotW, top+plotH)
	fmt.Fprintf(b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, top, left, top+plotH)
	for i := 0; i <= 5; i++ {
		v := p.maxY * float64(i) / 5
		fmt.Fprintf(b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", left, p.y(v), left+plotW, p.y(v))
		fmt.Fprintf(b, `<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, p.y(v)+4, trimFloat(v))
	}
	for c := 1; c <= p.maxCount; c++ {
		fmt.Fprintf(b, `<text x="%.1f" y="%g" text-anchor="middle">%d</text>`+"\n", p.x(float64(c)), top+plotH+18, c)
	}
	fmt.Fprintf(b, `<text x="%g" y="%g" text-anchor="middle">consecutive start failures (the n in 10 s x n²)</text>`+"\n", left+plotW/2, svgHeight-15)
	fmt.Fprintf(b, `<text transform="translate(18 %g) rotate(-90)" text-anchor="middle">delay before the next start (s, wall time)</text>`+"\n", top+plotH/2)
}

// bands are the envelope bands, one per count (the widest seen for that
// count).
func (p *plot) bands(b *strings.Builder) {
	bands := map[int][2]float64{}
	for _, a := range p.retries {
		lo, hi := a.Low.Seconds(), a.High.Seconds()
		if cur, ok := bands[a.FailCount]; ok {
			lo, hi = math.Min(lo, cur[0]), math.Max(hi, cur[1])
		}
		bands[a.FailCount] = [2]float64{lo, hi}
	}
	counts := make([]int, 0, len(bands))
	for c := range bands {
		counts = append(counts, c)
	}
	sort.Ints(counts)
	for _, c := range counts {
		lo, hi := bands[c][0], bands[c][1]
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#cfe3ff" stroke="#6a9bd8"><title>count %d: %ss to %ss</title></rect>`+"\n",
			p.x(float64(c))-p.slot*0.35, p.y(hi), p.slot*0.7, math.Max(p.y(lo)-p.y(hi), 1), c, trimFloat(lo), trimFloat(hi))
	}
}

// marks are the planned dashes and observed dots, spread across the slot
// so a herd stays readable.
func (p *plot) marks(b *strings.Builder) {
	perCount := map[int]int{}
	totals := map[int]int{}
	for _, a := range p.retries {
		totals[a.FailCount]++
	}
	for _, a := range p.t.sorted() {
		if !shown(a) {
			continue
		}
		i := perCount[a.FailCount]
		perCount[a.FailCount]++
		off := 0.0
		if n := totals[a.FailCount]; n > 1 {
			off = (float64(i)/float64(n-1) - 0.5) * p.slot * 0.6
		}
		cx := p.x(float64(a.FailCount)) + off
		if a.Planned > 0 {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333" stroke-width="1.5"/>`+"\n", cx-4, p.y(a.Planned.Seconds()), cx+4, p.y(a.Planned.Seconds()))
		}
		if a.Observed > 0 {
			color := "#1a7f37"
			if !a.InEnvelope(p.t.slack()) {
				color = "#d1242f"
			}
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s attempt %d: observed %s, planned %s, envelope %s..%s</title></circle>`+"\n",
				cx, p.y(a.Observed.Seconds()), color, html.EscapeString(a.VM), a.Attempt, round(a.Observed), round(a.Planned), round(a.Low), round(a.High))
		}
	}
}

func round(d time.Duration) string { return d.Round(time.Millisecond).String() }

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
