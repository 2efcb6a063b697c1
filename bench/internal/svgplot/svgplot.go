// Package svgplot draws the benchmarks' line charts as SVG, with nothing
// but the standard library: one or more panels stacked over a shared x
// axis, each with its own lines and legend. It draws what it is given and
// computes no statistics.
package svgplot

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
)

// Series is one line: points (X[i], Y[i]) joined in order.
type Series struct {
	Name  string
	Color string // any SVG color; "" picks one from Palette
	X, Y  []float64
	Step  bool // draw as steps (a histogram), not straight segments
}

// Panel is one plot area with its own y axis.
type Panel struct {
	Title  string
	Series []Series
	YMax   float64 // top of the y axis; 0 means the largest Y, rounded up
}

// Chart is a figure of panels stacked vertically over one x axis.
type Chart struct {
	Title          string
	XLabel, YLabel string
	XMin, XMax     float64 // the x axis; XMax 0 means the largest X
	Panels         []Panel
	Width          int // pixels; 0 means 760
	PanelHeight    int // pixels; 0 means 150
}

// Palette is the colors used, in order, for series without one.
var Palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

const (
	left, right   = 64, 16
	top, gap      = 48, 34
	bottomMargin  = 44
	legendLineLen = 18
)

// SVG renders the chart.
func (c Chart) SVG() []byte {
	w := c.Width
	if w == 0 {
		w = 760
	}
	ph := c.PanelHeight
	if ph == 0 {
		ph = 150
	}
	xmax := c.XMax
	if xmax == 0 {
		for _, p := range c.Panels {
			for _, s := range p.Series {
				for _, x := range s.X {
					xmax = math.Max(xmax, x)
				}
			}
		}
	}
	if xmax <= c.XMin {
		xmax = c.XMin + 1
	}
	h := top + len(c.Panels)*(ph+gap) - gap + bottomMargin
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(c.Title))
	pw := float64(w - left - right)
	xs := func(x float64) float64 { return left + (x-c.XMin)/(xmax-c.XMin)*pw }
	xstep := niceStep((xmax - c.XMin) / 8)
	color := 0
	for i, p := range c.Panels {
		y0 := float64(top + i*(ph+gap))
		ymax := p.YMax
		if ymax == 0 {
			for _, s := range p.Series {
				for _, y := range s.Y {
					ymax = math.Max(ymax, y)
				}
			}
			ymax = niceCeil(ymax)
		}
		if ymax <= 0 {
			ymax = 1
		}
		ys := func(y float64) float64 { return y0 + float64(ph) - math.Min(y, ymax)/ymax*float64(ph) }
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, pw, ph)
		if p.Title != "" {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-weight="bold">%s</text>`+"\n", left+4, y0-5, html.EscapeString(p.Title))
		}
		ystep := niceStep(ymax / 4)
		for y := 0.0; y <= ymax*1.0001; y += ystep {
			fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", left, left+pw, ys(y), ys(y))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-4, ys(y)+4, num(y))
		}
		for x := math.Ceil(c.XMin/xstep) * xstep; x <= xmax*1.0001; x += xstep {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", xs(x), xs(x), y0, y0+float64(ph))
			if i == len(c.Panels)-1 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", xs(x), y0+float64(ph)+14, num(x))
			}
		}
		lx := left + pw - 8
		for j := len(p.Series) - 1; j >= 0; j-- {
			s := p.Series[j]
			col := s.Color
			if col == "" {
				col = Palette[color%len(Palette)]
				color++
			}
			var pts bytes.Buffer
			for k := range s.X {
				if s.X[k] < c.XMin || s.X[k] > xmax {
					continue
				}
				if s.Step && k > 0 {
					fmt.Fprintf(&pts, "%.1f,%.1f ", xs(s.X[k]), ys(s.Y[k-1]))
				}
				fmt.Fprintf(&pts, "%.1f,%.1f ", xs(s.X[k]), ys(s.Y[k]))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.4" points="%s"/>`+"\n", col, bytes.TrimSpace(pts.Bytes()))
			// Legend, right-aligned in the panel's top corner.
			ly := y0 + 14 + float64(len(p.Series)-1-j)*13
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", lx-legendLineLen-4, ly+4, html.EscapeString(s.Name))
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", lx-legendLineLen, lx, ly, ly, col)
		}
	}
	bottom := float64(top + len(c.Panels)*(ph+gap) - gap)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+pw/2, bottom+32, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (top+bottom)/2, html.EscapeString(c.YLabel))
	b.WriteString("</svg>\n")
	return b.Bytes()
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

// niceCeil rounds v up to a multiple of a nice step.
func niceCeil(v float64) float64 {
	s := niceStep(v / 5)
	return math.Ceil(v/s) * s
}

func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}
