package timeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"
	"time"
)

func sample() *Timeline {
	s := time.Second
	return &Timeline{Title: "t", Seed: 7, TimeScale: 0.1, Slack: time.Millisecond, Attempts: []Attempt{
		{VM: "b", Attempt: 1, FailCount: 1, Planned: 1200 * time.Millisecond, Observed: 1210 * time.Millisecond, Low: 1 * s, High: 1500 * time.Millisecond},
		{VM: "a", Attempt: 2, FailCount: 2, Planned: 5 * s, Observed: 7 * s, Low: 4 * s, High: 6 * s},
		{VM: "a", Attempt: 1, FailCount: 1, Planned: 1100 * time.Millisecond, Observed: 1105 * time.Millisecond, Low: 1 * s, High: 1500 * time.Millisecond},
		{VM: "a", Attempt: 3, FailCount: 0},
	}}
}

func TestJSONLinesAreOrderedAndComplete(t *testing.T) {
	var buf bytes.Buffer
	if err := sample().WriteJSONLines(&buf); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	var lines []map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 5 || lines[0]["seed"] != 7.0 {
		t.Fatalf("lines = %v", lines)
	}
	var order []string
	for _, l := range lines[1:] {
		order = append(order, l["vm"].(string)+string(rune('0'+int(l["attempt"].(float64)))))
	}
	if strings.Join(order, ",") != "a1,a2,a3,b1" {
		t.Fatalf("order = %v", order)
	}
}

func TestSVGMarksEveryRetryAndFlagsTheOneOutside(t *testing.T) {
	var buf bytes.Buffer
	if err := sample().WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML.
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	circles, bands := 0, 0
	red := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "circle":
				circles++
				for _, a := range se.Attr {
					if a.Name.Local == "fill" && a.Value == "#d1242f" {
						red++
					}
				}
			case "rect":
				bands++
			}
		}
	}
	if circles != 3 {
		t.Fatalf("circles = %d, want one per retry (3)", circles)
	}
	if red != 1 {
		t.Fatalf("red marks = %d, want 1 (a's second retry, 7s outside 4..6s)", red)
	}
	if bands != 3 { // background + one band per count (1, 2)
		t.Fatalf("rects = %d, want background + 2 bands", bands)
	}
}

func TestInEnvelope(t *testing.T) {
	a := Attempt{Observed: 6100 * time.Millisecond, Low: 4 * time.Second, High: 6 * time.Second}
	if a.InEnvelope(0) || !a.InEnvelope(200*time.Millisecond) {
		t.Fatal("slack not honoured")
	}
}
