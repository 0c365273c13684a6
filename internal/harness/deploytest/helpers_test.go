package deploytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// root returns the repository root (the folder holding go.mod).
func root(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatal("go.mod not found above the working directory")
		}
	}
}

func readFile(t testing.TB, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{root(t)}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func glob(t testing.TB, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(root(t), pattern))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		t.Fatalf("no file matches %s", pattern)
	}
	sort.Strings(m)
	return m
}

// rule is one alerting or recording rule of deploy/prometheus/rules.
type rule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []rule `yaml:"rules"`
	} `yaml:"groups"`
}

// rules returns every rule of deploy/prometheus/rules/*.yml.
func rules(t testing.TB) []rule {
	t.Helper()
	var out []rule
	for _, f := range glob(t, "deploy/prometheus/rules/*.yml") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf ruleFile
		if err := yaml.UnmarshalWithOptions(b, &rf, yaml.Strict()); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			out = append(out, g.Rules...)
		}
	}
	return out
}

func alerts(t testing.TB) []rule {
	var out []rule
	for _, r := range rules(t) {
		if r.Alert != "" {
			out = append(out, r)
		}
	}
	return out
}

// panelQuery is one PromQL query of a dashboard: a panel target or a template variable.
type panelQuery struct {
	Dashboard, Panel string
	Expr             string
	DatasourceUID    string // the target's (or variable's) datasource uid
	PanelDSUID       string // the panel's datasource uid ("" for variables)
}

type dashboard struct {
	File  string
	UID   string
	Title string
	Raw   map[string]any
}

func dashboards(t testing.TB) []dashboard {
	t.Helper()
	var out []dashboard
	for _, f := range glob(t, "deploy/grafana/dashboards/*.json") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatalf("%s: not valid JSON: %v", f, err)
		}
		uid, _ := raw["uid"].(string)
		title, _ := raw["title"].(string)
		out = append(out, dashboard{File: filepath.Base(f), UID: uid, Title: title, Raw: raw})
	}
	return out
}

func dsUID(v any) string {
	m, _ := v.(map[string]any)
	s, _ := m["uid"].(string)
	return s
}

// queries returns every query of every dashboard, nested row panels included.
func (d dashboard) queries() []panelQuery {
	var out []panelQuery
	var walk func(ps []any)
	walk = func(ps []any) {
		for _, p := range ps {
			pm, _ := p.(map[string]any)
			title, _ := pm["title"].(string)
			if sub, ok := pm["panels"].([]any); ok {
				walk(sub)
			}
			targets, _ := pm["targets"].([]any)
			for _, tg := range targets {
				tm, _ := tg.(map[string]any)
				expr, _ := tm["expr"].(string)
				out = append(out, panelQuery{Dashboard: d.Title, Panel: title, Expr: expr,
					DatasourceUID: dsUID(tm["datasource"]), PanelDSUID: dsUID(pm["datasource"])})
			}
		}
	}
	ps, _ := d.Raw["panels"].([]any)
	walk(ps)
	if tp, ok := d.Raw["templating"].(map[string]any); ok {
		list, _ := tp["list"].([]any)
		for _, v := range list {
			vm, _ := v.(map[string]any)
			if vm["type"] != "query" {
				continue
			}
			name, _ := vm["name"].(string)
			expr, _ := vm["definition"].(string)
			out = append(out, panelQuery{Dashboard: d.Title, Panel: "variable $" + name, Expr: expr, DatasourceUID: dsUID(vm["datasource"])})
		}
	}
	return out
}

var (
	metricRE   = regexp.MustCompile(`\bbookrecon_[a-z0-9_]+`)
	recordedRE = regexp.MustCompile(`\bbookrecon:[a-z0-9_:]+`)
	// selectorRE finds metric{matchers}; matcherRE the equality matchers inside.
	selectorRE = regexp.MustCompile(`\b(bookrecon_[a-z0-9_]+)\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-z_]+)\s*=\s*"([^"]*)"`)
)

// metricNames returns the bookrecon_* names an expression reads, histogram series suffixes
// (_bucket, _sum, _count) mapped to their family when the family is a histogram in types.
func metricNames(expr string, types map[string]string) []string {
	var out []string
	for _, n := range metricRE.FindAllString(expr, -1) {
		out = append(out, family(n, types))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func family(n string, types map[string]string) string {
	for _, sfx := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(n, sfx); ok && (types[base] == "histogram" || types[base] == "summary") {
			return base
		}
	}
	return n
}

// equalityMatchers returns (metric, label, value) for every metric{label="value"} of expr.
func equalityMatchers(expr string) [][3]string {
	var out [][3]string
	for _, s := range selectorRE.FindAllStringSubmatch(expr, -1) {
		for _, m := range matcherRE.FindAllStringSubmatch(s[2], -1) { // != and =~ do not match
			out = append(out, [3]string{s[1], m[1], m[2]})
		}
	}
	return out
}
