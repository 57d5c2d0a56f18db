package check

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Level is how bad a finding is.
type Level string

// Levels.
const (
	Pass Level = "PASS"
	Warn Level = "WARN"
	Fail Level = "FAIL"
)

// Finding is one result: what was checked on which object, what was found, and the fix.
type Finding struct {
	Level   Level  `json:"level"`
	Check   string `json:"check"`
	Object  string `json:"object"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// Report is every finding of one run, in the order the checks ran.
type Report struct {
	Findings []Finding `json:"findings"`
}

func (r *Report) add(level Level, check, object, message, fix string) {
	r.Findings = append(r.Findings, Finding{Level: level, Check: check, Object: object, Message: message, Fix: fix})
}

func (r *Report) pass(check, object, message string) { r.add(Pass, check, object, message, "") }

func (r *Report) warn(check, object, message, fix string) { r.add(Warn, check, object, message, fix) }

func (r *Report) fail(check, object, message, fix string) { r.add(Fail, check, object, message, fix) }

// Failed reports whether any finding is a FAIL.
func (r *Report) Failed() bool {
	for _, f := range r.Findings {
		if f.Level == Fail {
			return true
		}
	}
	return false
}

// Counts are the findings by level.
func (r *Report) Counts() map[Level]int {
	c := map[Level]int{}
	for _, f := range r.Findings {
		c[f.Level]++
	}
	return c
}

// Write prints the report as a table (one finding per line, the fix after the message), JSON or
// YAML.
func (r *Report) Write(w io.Writer, format string) error {
	c := r.Counts()
	// What a script reads first: the counts, beside the findings they count.
	doc := struct {
		Findings []Finding `json:"findings"`
		Summary  Summary   `json:"summary"`
	}{r.Findings, Summary{Passed: c[Pass], Warnings: c[Warn], Failed: c[Fail]}}
	switch format {
	case "json":
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LEVEL\tCHECK\tOBJECT\tMESSAGE")
		for _, f := range r.Findings {
			msg := f.Message
			if f.Fix != "" {
				msg += " Fix: " + f.Fix
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Level, f.Check, f.Object, msg)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprintf(w, "%d passed, %s, %d failed\n", c[Pass], fmt.Sprintf("%d %s", c[Warn], plural(c[Warn], "warning", "warnings")), c[Fail])
		return err
	}
	return fmt.Errorf("output %q: use table, json or yaml", format)
}

// Summary counts a report's findings by level.
type Summary struct {
	Passed   int `json:"passed"`
	Warnings int `json:"warnings"`
	Failed   int `json:"failed"`
}

// sentence makes a message end the way the report's lines do.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasSuffix(s, ".") {
		return s
	}
	return s + "."
}
