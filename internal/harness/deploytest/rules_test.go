package deploytest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// runbookBase is the prefix of every runbook_url; the rest is docs/runbooks/<alertname>.md.
const runbookBase = "https://github.com/bookrecon/bookrecon/blob/main/"

// promtool returns the path of promtool. Its absence fails the test: .ci/run installs Debian's
// prometheus package, and so can a developer (apt-get install prometheus).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install it (Debian: apt-get install prometheus; .ci/run does)")
	}
	return p
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = root(t)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}

func rel(t *testing.T, paths []string) []string {
	var out []string
	for _, p := range paths {
		r, err := filepath.Rel(root(t), p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestPromtoolCheckRules: the rule files are valid (syntax, PromQL, templates).
func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, append([]string{"check", "rules"}, rel(t, glob(t, "deploy/prometheus/rules/*.yml"))...)...)
}

// TestPromtoolCheckConfig: prometheus.yml is valid and its rule_files glob finds the rules.
func TestPromtoolCheckConfig(t *testing.T) {
	runPromtool(t, "check", "config", "deploy/prometheus/prometheus.yml")
}

// TestPromtoolTestRules runs the promtool unit tests of every alert.
func TestPromtoolTestRules(t *testing.T) {
	runPromtool(t, append([]string{"test", "rules"}, rel(t, glob(t, "deploy/prometheus/tests/*.yml"))...)...)
}

// TestAlertsHaveRunbooks: every alert has a severity, summary, description and a runbook_url
// whose page exists and says what the alert means and what to do; every runbook page belongs
// to an alert.
func TestAlertsHaveRunbooks(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range alerts(t) {
		if seen[a.Alert] {
			t.Errorf("alert %s defined twice", a.Alert)
		}
		seen[a.Alert] = true
		if s := a.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", a.Alert, s)
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(a.Annotations[k]) == "" {
				t.Errorf("%s: no %s annotation", a.Alert, k)
			}
		}
		want := runbookBase + "docs/runbooks/" + a.Alert + ".md"
		if a.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", a.Alert, a.Annotations["runbook_url"], want)
			continue
		}
		b, err := os.ReadFile(filepath.Join(root(t), "docs", "runbooks", a.Alert+".md"))
		if err != nil {
			t.Errorf("%s: runbook missing: %v", a.Alert, err)
			continue
		}
		for _, h := range []string{"# " + a.Alert, "## What it means", "## What to do"} {
			if !bytes.Contains(b, []byte(h)) {
				t.Errorf("docs/runbooks/%s.md: no %q", a.Alert, h)
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no alert found")
	}
	for _, f := range glob(t, "docs/runbooks/*.md") {
		name := strings.TrimSuffix(filepath.Base(f), ".md")
		if name != "README" && !seen[name] {
			t.Errorf("docs/runbooks/%s.md belongs to no alert", name)
		}
	}
}

type promtoolTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestEveryAlertUnitTested: every alert has a promtool case where it fires and one where it
// does not, and every test file loads both rule files (alerts read recorded series).
func TestEveryAlertUnitTested(t *testing.T) {
	firing, silent := map[string]bool{}, map[string]bool{}
	for _, f := range glob(t, "deploy/prometheus/tests/*.yml") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var pt promtoolTests
		if err := yaml.Unmarshal(b, &pt); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, want := range []string{"../rules/recording.yml", "../rules/alerts.yml"} {
			if !slices.Contains(pt.RuleFiles, want) {
				t.Errorf("%s: rule_files lacks %s", filepath.Base(f), want)
			}
		}
		for _, tc := range pt.Tests {
			for _, at := range tc.AlertRuleTest {
				if len(at.ExpAlerts) > 0 {
					firing[at.Alertname] = true
				} else {
					silent[at.Alertname] = true
				}
			}
		}
	}
	for _, a := range alerts(t) {
		if !firing[a.Alert] {
			t.Errorf("%s: no promtool case where it fires", a.Alert)
		}
		if !silent[a.Alert] {
			t.Errorf("%s: no promtool case where it stays silent", a.Alert)
		}
	}
}

// TestRecordingRulesWired: every recorded series an alert or a panel reads is defined, and every
// recording rule is read by an alert or a panel.
func TestRecordingRulesWired(t *testing.T) {
	defined, used := map[string]bool{}, map[string]bool{}
	for _, r := range rules(t) {
		if r.Record != "" {
			defined[r.Record] = true
		}
	}
	var exprs []string
	for _, r := range rules(t) {
		if r.Alert != "" {
			exprs = append(exprs, r.Expr)
		}
	}
	for _, d := range dashboards(t) {
		for _, q := range d.queries() {
			exprs = append(exprs, q.Expr)
		}
	}
	for _, e := range exprs {
		for _, n := range recordedRE.FindAllString(e, -1) {
			used[n] = true
			if !defined[n] {
				t.Errorf("%s is read (%q) but no recording rule defines it", n, e)
			}
		}
	}
	for n := range defined {
		if !used[n] {
			t.Errorf("recording rule %s is read by no alert or panel", n)
		}
	}
}
