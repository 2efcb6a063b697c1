package replay

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// WriteSVG writes, into dir (created if need be), one SVG file per
// policy: its requests admitted and rejected per second over the logs'
// time span, one panel per configuration on a shared scale, and the
// shadow rejections when there were any. It returns the files' paths, in
// the order of r.Policies. The same report always gives the same bytes.
func (r *Report) WriteSVG(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	used := map[string]bool{}
	for i := range r.Policies {
		p := &r.Policies[i]
		if p.Row != RowPolicy {
			continue
		}
		c, ok := r.chart(p)
		if !ok {
			continue
		}
		name := fileName(p.Policy)
		for n := 2; used[name]; n++ {
			name = fileName(p.Policy) + "-" + strconv.Itoa(n)
		}
		used[name] = true
		path := filepath.Join(dir, name+".svg")
		if err := os.WriteFile(path, c.svg(), 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// fileName makes a policy's name a file name: letters, digits, '.', '-'
// and '_' kept, anything else '_'.
func fileName(policy string) string {
	b := []byte(policy)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	s := strings.TrimLeft(string(b), ".")
	if s == "" {
		s = "policy"
	}
	return s
}

// chart lays out p's timelines on one time axis; false if p has none.
func (r *Report) chart(p *PolicyReport) (*chart, bool) {
	var width, from, to int64
	found := false
	for _, tl := range p.tls {
		if tl == nil || tl.pts == nil {
			continue
		}
		f, t := tl.span()
		if !found {
			width, from, to, found = tl.width, f, t, true
			continue
		}
		width, from, to = max(width, tl.width), min(from, f), max(to, t)
	}
	if !found {
		return nil, false
	}
	from = floorDiv(from, width) * width
	n := int((to - from + width - 1) / width)

	// The x axis in the unit that suits the span.
	span := float64(n) * float64(width)
	unit, per := "s", 1.0
	switch {
	case span > 36*3600:
		unit, per = "h", 3600
	case span > 2*3600:
		unit, per = "min", 60
	}
	start := time.Unix(from, 0).UTC()
	c := &chart{
		title:  fmt.Sprintf("policy %q: requests per second", p.Policy),
		note:   fmt.Sprintf("from %s, %s buckets", start.Format(time.RFC3339), time.Duration(width)*time.Second),
		xLabel: fmt.Sprintf("time since %s (%s)", start.Format(time.RFC3339), unit),
		yLabel: "requests/s",
		dx:     float64(width) / per,
		n:      n,
	}
	for j, tl := range p.tls {
		pn := panel{title: p.Results[j].Config}
		if tl == nil {
			pn.title += ": no request matched the policy"
			if p.Results[j].Absent {
				pn.title = p.Results[j].Config + ": no such policy"
			}
			c.panels = append(c.panels, pn)
			continue
		}
		pts := tl.rebin(width, from, n)
		adm, rej, sh := make([]float64, n), make([]float64, n), make([]float64, n)
		anyShadow := false
		for k, q := range pts {
			adm[k] = float64(q.admitted) / float64(width)
			rej[k] = float64(q.rejected) / float64(width)
			sh[k] = float64(q.shadow) / float64(width)
			anyShadow = anyShadow || q.shadow > 0
		}
		pn.series = []series{{name: "admitted", color: "#2ca02c", y: adm}, {name: "rejected", color: "#d62728", y: rej}}
		if anyShadow {
			pn.series = append(pn.series, series{name: "shadow rejected (admitted)", color: "#ff7f0e", y: sh})
		}
		c.panels = append(c.panels, pn)
	}
	return c, true
}

// series is one line of a chart: a value per bucket, drawn as steps.
type series struct {
	name, color string
	y           []float64
}

// panel is one plot area.
type panel struct {
	title  string
	series []series
}

// chart is panels stacked over one x axis of n buckets of dx (in the x
// axis' unit) from 0, all on one y scale.
type chart struct {
	title, note    string
	xLabel, yLabel string
	dx             float64
	n              int
	panels         []panel
}

// Layout, in pixels.
const (
	chartWidth    = 800
	panelHeight   = 160
	marginLeft    = 70
	marginRight   = 20
	marginTop     = 62
	panelGap      = 40
	marginBottom  = 48
	legendLineLen = 18
)

// svg renders the chart: a self-contained SVG document (no scripts, no
// external fonts or styles), the same bytes for the same chart.
func (c *chart) svg() []byte {
	xmax := float64(c.n) * c.dx
	if xmax <= 0 {
		xmax = 1
	}
	ymax := 0.0
	for _, p := range c.panels {
		for _, s := range p.series {
			for _, y := range s.y {
				ymax = math.Max(ymax, y)
			}
		}
	}
	ymax = niceCeil(ymax)
	h := marginTop + len(c.panels)*(panelHeight+panelGap) - panelGap + marginBottom
	pw := float64(chartWidth - marginLeft - marginRight)
	xs := func(x float64) float64 { return marginLeft + x/xmax*pw }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", chartWidth, h, chartWidth, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartWidth, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", marginLeft, esc(c.title))
	fmt.Fprintf(&b, `<text x="%d" y="36" fill="#555">%s</text>`+"\n", marginLeft, esc(c.note))
	xstep := niceStep(xmax / 8)
	ystep := niceStep(ymax / 5)
	for i, p := range c.panels {
		y0 := float64(marginTop + i*(panelHeight+panelGap))
		ys := func(y float64) float64 { return y0 + panelHeight - math.Min(y, ymax)/ymax*panelHeight }
		fmt.Fprintf(&b, `<text x="%d" y="%s" font-weight="bold">%s</text>`+"\n", marginLeft, f1(y0-6), esc(p.title))
		for y := 0.0; y <= ymax*1.0001; y += ystep {
			fmt.Fprintf(&b, `<line x1="%d" x2="%s" y1="%s" y2="%s" stroke="#eee"/>`+"\n", marginLeft, f1(marginLeft+pw), f1(ys(y)), f1(ys(y)))
			fmt.Fprintf(&b, `<text x="%d" y="%s" text-anchor="end">%s</text>`+"\n", marginLeft-4, f1(ys(y)+4), num(y))
		}
		for x := 0.0; x <= xmax*1.0001; x += xstep {
			fmt.Fprintf(&b, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#eee"/>`+"\n", f1(xs(x)), f1(xs(x)), f1(y0), f1(y0+panelHeight))
			if i == len(c.panels)-1 {
				fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", f1(xs(x)), f1(y0+panelHeight+14), num(x))
			}
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%s" width="%s" height="%d" fill="none" stroke="#999"/>`+"\n", marginLeft, f1(y0), f1(pw), panelHeight)
		for j, s := range p.series {
			var pts bytes.Buffer
			for k, y := range s.y {
				if k > 0 {
					pts.WriteByte(' ')
				}
				x := float64(k) * c.dx
				fmt.Fprintf(&pts, "%s,%s %s,%s", f1(xs(x)), f1(ys(y)), f1(xs(x+c.dx)), f1(ys(y)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.2" points="%s"/>`+"\n", s.color, pts.Bytes())
			// The legend, in the panel's top right corner.
			lx, ly := marginLeft+pw-8, y0+14+float64(j)*13
			fmt.Fprintf(&b, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s" stroke-width="2"/>`+"\n", f1(lx-legendLineLen), f1(lx), f1(ly), f1(ly), s.color)
			fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="end">%s</text>`+"\n", f1(lx-legendLineLen-4), f1(ly+4), esc(s.name))
		}
	}
	bottom := float64(marginTop + len(c.panels)*(panelHeight+panelGap) - panelGap)
	fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", f1(marginLeft+pw/2), f1(bottom+34), esc(c.xLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %s) rotate(-90)" text-anchor="middle">%s</text>`+"\n", f1((marginTop+bottom)/2), esc(c.yLabel))
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func esc(s string) string { return html.EscapeString(s) }

// f1 formats a coordinate with one decimal.
func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// num formats an axis label: at most three decimals, no trailing zeros.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}

// niceStep returns 1, 2 or 5 times a power of ten, at least v.
func niceStep(v float64) float64 {
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

// niceCeil rounds v up to a multiple of a nice step; 1 for v ≤ 0.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	s := niceStep(v / 5)
	return math.Ceil(v/s) * s
}
