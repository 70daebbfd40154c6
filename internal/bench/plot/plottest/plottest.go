// Package plottest draws a figure as the benchmark command does and reads back what its SVG
// shows, for the benchmarks' tests: the texts (titles, legend entries), the point marks, the
// bars and the series' lines.
package plottest

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/plot"
)

// SVG is what a drawn figure shows. Each series also draws its sample in the legend: a line
// with a mark, or a bar.
type SVG struct {
	Size  int      // bytes
	Texts []string // every text element's content
	Marks int      // point marks (circles), those in legends included
	Bars  int      // filled rectangles other than the white backgrounds, legends' included
	Lines int      // the series' lines (staircases too), legends' included
}

// Draw draws f as SVG and reads it back; the test fails if it cannot be drawn or is not XML.
func Draw(t testing.TB, f harness.Figure) SVG {
	t.Helper()
	var buf bytes.Buffer
	if err := plot.Draw(&buf, f, "svg"); err != nil {
		t.Fatalf("draw %q: %v", f.Title, err)
	}
	s, err := Read(buf.Bytes())
	if err != nil {
		t.Fatalf("read the SVG of %q: %v", f.Title, err)
	}
	return s
}

// Read parses an SVG drawn by package plot.
func Read(data []byte) (SVG, error) {
	s := SVG{Size: len(data)}
	dec := xml.NewDecoder(bytes.NewReader(data))
	var text *strings.Builder
	sawSVG := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s, err
		}
		switch el := tok.(type) {
		case xml.StartElement:
			switch el.Name.Local {
			case "svg":
				sawSVG = true
			case "text":
				text = new(strings.Builder)
			case "path":
				s.path(attr(el, "d"), attr(el, "style"))
			}
		case xml.CharData:
			if text != nil {
				text.Write(el)
			}
		case xml.EndElement:
			if el.Name.Local == "text" && text != nil {
				s.Texts = append(s.Texts, text.String())
				text = nil
			}
		}
	}
	if !sawSVG {
		return s, errors.New("no svg element")
	}
	return s, nil
}

// path counts a path by what it is: a circle is drawn as two arcs, a bar as a closed filled
// rectangle, a series' line is stroked 1.2 points wide (axes, ticks and grid are thinner).
func (s *SVG) path(d, style string) {
	switch {
	case strings.Contains(d, "A"):
		s.Marks++
	case strings.HasSuffix(d, "Z") && strings.Count(d, "L") == 3 && strings.HasPrefix(style, "fill:") &&
		!strings.Contains(style, "#FFFFFF") && !strings.Contains(style, "stroke"):
		s.Bars++
	case strings.Contains(style, "stroke-width:1.2"):
		s.Lines++
	}
}

func attr(el xml.StartElement, name string) string {
	for _, a := range el.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// Count is how many text elements read text.
func (s SVG) Count(text string) int {
	n := 0
	for _, t := range s.Texts {
		if t == text {
			n++
		}
	}
	return n
}

// Expect checks that the figure shows each name once (legends: a series' name in one panel),
// marks point marks and bars bars, legends' included.
func (s SVG) Expect(t testing.TB, names map[string]int, marks, bars int) {
	t.Helper()
	for n, want := range names {
		if got := s.Count(n); got != want {
			t.Errorf("%q shown %d times, want %d (texts: %q)", n, got, want, s.Texts)
		}
	}
	if s.Marks != marks {
		t.Errorf("%d point marks, want %d", s.Marks, marks)
	}
	if s.Bars != bars {
		t.Errorf("%d bars, want %d", s.Bars, bars)
	}
}
