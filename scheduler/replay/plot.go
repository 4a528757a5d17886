package replay

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Series is one curve of a plot: allocated % of capacity at each 1% step of
// arrived request (index = arrived %).
type Series struct {
	Name  string
	Curve []float64
	// Dashed draws the curve dashed (used for the anchor's curves).
	Dashed bool
}

// SeriesOf turns summaries into plot series.
func SeriesOf(sums []Summary) []Series {
	out := make([]Series, 0, len(sums))
	for _, s := range sums {
		out = append(out, Series{Name: s.Policy, Curve: s.Curve})
	}
	return out
}

// ReadAnchorCurves reads fgd_allocation_curves.csv and returns, for
// workload, the mean curve over seeds of each of the given anchor policies
// (e.g. "05-BestFit", "06-FGD"), in that order; missing ones are skipped.
func ReadAnchorCurves(path, workload string, policies ...string) ([]Series, error) {
	t, err := readTableFile(path, "workload", "sc_policy", "0")
	if err != nil {
		return nil, err
	}
	var out []Series
	for _, pol := range policies {
		sum := make([]float64, CurveSteps)
		n := 0
		for _, row := range t.rows {
			if t.str(row, "workload") != workload || t.str(row, "sc_policy") != pol {
				continue
			}
			for k := range sum {
				v, err := strconv.ParseFloat(t.str(row, strconv.Itoa(k)), 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %s %s column %d: %w", path, workload, pol, k, err)
				}
				sum[k] += v
			}
			n++
		}
		if n == 0 {
			continue
		}
		for k := range sum {
			sum[k] /= float64(n)
		}
		out = append(out, Series{Name: "anchor " + pol, Curve: sum, Dashed: true})
	}
	return out, nil
}

var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
	{0xe3, 0x77, 0xc2, 0xff}, {0x17, 0xbe, 0xcf, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
}

// panel is one plot area: data ranges mapped onto a pixel rectangle.
type panel struct {
	r                      image.Rectangle
	x0, x1, y0, y1, dx, dy float64
}

func (p panel) px(x, y float64) (int, int) {
	fx := float64(p.r.Min.X) + (x-p.x0)/(p.x1-p.x0)*float64(p.r.Dx())
	fy := float64(p.r.Max.Y) - (y-p.y0)/(p.y1-p.y0)*float64(p.r.Dy())
	return int(fx + 0.5), int(fy + 0.5)
}

// Plot writes a PNG of the series: on the left the whole curves (arrived
// 0–130% × allocated 0–100%), on the right a zoom on where they part
// (arrived 80–130% × allocated 80–100%), with a legend.
func Plot(w io.Writer, series []Series, title string) error {
	const W, H = 1200, 560
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	label(img, 20, 20, title+": allocated GPU (% of capacity) vs arrived GPU request (% of capacity)", color.Black)
	panels := []panel{
		{r: image.Rect(60, 56, 430, 500), x0: 0, x1: 130, y0: 0, y1: 100, dx: 10, dy: 10},
		{r: image.Rect(500, 56, 930, 500), x0: 80, x1: 130, y0: 80, y1: 100, dx: 5, dy: 2},
	}
	grid := color.RGBA{0xe0, 0xe0, 0xe0, 0xff}
	for _, p := range panels {
		for x := p.x0; x <= p.x1+1e-9; x += p.dx {
			a, _ := p.px(x, p.y0)
			line(img, a, p.r.Min.Y, a, p.r.Max.Y, grid, 1)
			s := strconv.Itoa(int(x))
			label(img, a-len(s)*7/2, p.r.Max.Y+16, s, color.Black)
		}
		for y := p.y0; y <= p.y1+1e-9; y += p.dy {
			_, b := p.px(p.x0, y)
			line(img, p.r.Min.X, b, p.r.Max.X, b, grid, 1)
			s := strconv.Itoa(int(y))
			label(img, p.r.Min.X-8-len(s)*7, b+4, s, color.Black)
		}
		rect(img, p.r, color.Black)
		label(img, p.r.Min.X, p.r.Min.Y-6, "allocated, %", color.Black)
		label(img, p.r.Min.X+p.r.Dx()/2-70, p.r.Max.Y+34, "arrived request, %", color.Black)
		for i, s := range series {
			c := palette[i%len(palette)]
			var prevX, prevY int
			seg := 0
			for k, v := range s.Curve {
				x, y := float64(k), v
				if x < p.x0 || x > p.x1 {
					continue
				}
				y = min(max(y, p.y0), p.y1)
				cx, cy := p.px(x, y)
				if k > 0 && float64(k-1) >= p.x0 {
					if !s.Dashed || seg%2 == 0 {
						line(img, prevX, prevY, cx, cy, c, 2)
					}
					seg++
				}
				prevX, prevY = cx, cy
			}
		}
	}
	for i, s := range series {
		c := palette[i%len(palette)]
		y := 70 + i*22
		for x := 950; x < 990; x += 2 {
			if !s.Dashed || (x/8)%2 == 0 {
				line(img, x, y, x+2, y, c, 2)
			}
		}
		label(img, 998, y+4, s.Name, color.Black)
	}
	return png.Encode(w, img)
}

func label(img *image.RGBA, x, y int, s string, c color.Color) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func rect(img *image.RGBA, r image.Rectangle, c color.Color) {
	line(img, r.Min.X, r.Min.Y, r.Max.X, r.Min.Y, c, 1)
	line(img, r.Min.X, r.Max.Y, r.Max.X, r.Max.Y, c, 1)
	line(img, r.Min.X, r.Min.Y, r.Min.X, r.Max.Y, c, 1)
	line(img, r.Max.X, r.Min.Y, r.Max.X, r.Max.Y, c, 1)
}

// line draws a Bresenham line width pixels thick.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, width int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		for a := 0; a < width; a++ {
			for b := 0; b < width; b++ {
				img.Set(x0+a, y0+b, c)
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
