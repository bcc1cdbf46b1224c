package faults

import (
	"fmt"
	"strings"
)

// MarkdownTable renders the catalog as a Markdown table for the README, one
// row per fault: name, parameters, where it acts, outcome (phase / reason /
// exit code) and description. Every fault also takes the modifiers P%, N*,
// delay and attempts, which the table does not repeat.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| Fault | Parameters | Acts at | Outcome (phase / reason / exit) | What it does |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	for _, d := range catalog {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n",
			d.Name, cell(paramsCell(d.Params)), cell(d.ActsAt), cell(outcomesCell(d.Outcomes)), cell(d.Description))
	}
	return b.String()
}

func paramsCell(ps []Param) string {
	if len(ps) == 0 {
		return "none"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		s := fmt.Sprintf("`%s` (%s", p.Name, p.Type)
		if p.Required {
			s += ", required"
		} else {
			s += ", default " + p.Default
		}
		if len(p.Allowed) > 0 {
			s += "; one of " + strings.Join(p.Allowed, ", ")
		}
		parts[i] = s + ")"
	}
	return strings.Join(parts, "<br>")
}

func outcomesCell(os []Outcome) string {
	parts := make([]string, len(os))
	for i, o := range os {
		phase, reason, exit := dash(o.Phase), dash(o.Reason), "keeps running"
		if o.Exit != ExitNone {
			exit = fmt.Sprintf("exit %d", o.Exit)
		}
		s := fmt.Sprintf("%s / %s / %s", phase, reason, exit)
		if o.When != "" {
			s = o.When + ": " + s
		}
		parts[i] = s
	}
	return strings.Join(parts, "<br>")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// cell escapes the Markdown table separator.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
