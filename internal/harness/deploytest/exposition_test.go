package deploytest

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/metrics.md from the services' exposition")

// TestServicesExposition starts the services in-process (see startStack) and checks, on what
// they actually export:
//   - kprom: franz-go's client metrics are registered (namespace bookrecon_kafka);
//   - lint: every registry passes client_golang's testutil.GatherAndLint (known kprom naming
//     problems excepted, below);
//   - names: every bookrecon_* metric the alert rules, recording rules and dashboards read is
//     exported, and every label="value" they match on exists as a series (all pre-created);
//   - catalogue: docs/metrics.md lists exactly the bookrecon_* metrics exported (the generated
//     part; -update rewrites it);
//   - logs: every service logs JSON lines through slog with the same field names, franz-go's
//     lines included.
func TestServicesExposition(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the services on the real broker and PostgreSQL")
	}
	s := startStack(t)
	cat := catalogue(t, s)

	t.Run("lint", func(t *testing.T) {
		for _, svc := range services {
			problems, err := testutil.GatherAndLint(s.regs[svc])
			if err != nil {
				t.Fatalf("%s: %v", svc, err)
			}
			for _, p := range problems {
				if knownLintProblem(p.Metric, p.Text) {
					continue
				}
				t.Errorf("%s: %s: %s", svc, p.Metric, p.Text)
			}
		}
	})

	t.Run("kprom", func(t *testing.T) {
		// franz-go's client metrics are registered on each Kafka-using service's registry under
		// bookrecon_kafka_<service>_ (the buffered_* gauges exist as soon as the client does).
		for _, svc := range []string{"ingester", "reconciler", "escalator"} {
			mfs := s.gather(t, svc)
			for _, n := range []string{"buffered_produce_bytes", "buffered_fetch_bytes"} {
				if _, ok := mfs["bookrecon_kafka_"+svc+"_"+n]; !ok {
					t.Errorf("%s: bookrecon_kafka_%s_%s not exported: kprom not registered", svc, svc, n)
				}
			}
		}
		for _, n := range []string{"bookrecon_kafka_ingester_connects_total", "bookrecon_kafka_ingester_fetch_bytes_total"} {
			if _, ok := s.gather(t, "ingester")[n]; !ok {
				t.Errorf("ingester: %s not exported after consuming the sample", n)
			}
		}
	})

	t.Run("names", func(t *testing.T) {
		types := map[string]string{}
		for n, m := range cat {
			types[n] = m.Type
		}
		series := map[[3]string]bool{} // metric, label, value
		labels := map[[2]string]bool{}
		for _, svc := range services {
			for name, mf := range s.gather(t, svc) {
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						series[[3]string{name, l.GetName(), l.GetValue()}] = true
						labels[[2]string{name, l.GetName()}] = true
					}
				}
			}
		}
		// The counter alerts judge a process younger than their window by its start time
		// (alerts.yml, "Restarts"): every service must export it.
		for _, svc := range services {
			if _, ok := s.gather(t, svc)["process_start_time_seconds"]; !ok {
				t.Errorf("%s does not export process_start_time_seconds, which the counter alerts read", svc)
			}
		}
		for _, u := range usages(t) {
			for _, n := range metricNames(u.Expr, types) {
				if _, ok := cat[n]; !ok {
					t.Errorf("%s reads %s, which no service exports", u.Who, n)
				}
			}
			for _, m := range equalityMatchers(u.Expr) {
				name := family(m[0], types)
				if cat[name].Kprom {
					continue
				}
				if !series[[3]string{name, m[1], m[2]}] {
					t.Errorf("%s matches %s{%s=%q}: no such series is exported (label known: %v)", u.Who, name, m[1], m[2], labels[[2]string{name, m[1]}])
				}
			}
		}
	})

	t.Run("catalogue", func(t *testing.T) {
		path := filepath.Join(root(t), "docs", "metrics.md")
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		gen := renderCatalogue(cat, usedBy(t, cat))
		before, rest, ok1 := strings.Cut(string(doc), beginMarker)
		_, after, ok2 := strings.Cut(rest, endMarker)
		if !ok1 || !ok2 {
			t.Fatalf("docs/metrics.md lacks the %q … %q markers", beginMarker, endMarker)
		}
		want := before + beginMarker + "\n" + gen + endMarker + after
		if want == string(doc) {
			return
		}
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Log("docs/metrics.md rewritten")
			return
		}
		t.Errorf("docs/metrics.md disagrees with what the services export; run\n\tgo test ./internal/deploytest -run TestServicesExposition -update\nand review the diff. Generated catalogue:\n%s", gen)
	})

	t.Run("logs", func(t *testing.T) {
		snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
		for _, svc := range services {
			franz := 0
			out := s.logs[svc].String()
			if out == "" {
				t.Errorf("%s logged nothing", svc)
			}
			for line := range strings.Lines(out) {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Errorf("%s: not a JSON line: %q", svc, line)
					continue
				}
				for _, k := range []string{"time", "level", "msg"} {
					if _, ok := rec[k]; !ok {
						t.Errorf("%s: line without %q: %s", svc, k, line)
					}
				}
				if rec["service"] != svc {
					t.Errorf("%s: service = %v: %s", svc, rec["service"], line)
				}
				for k := range rec {
					if !snake.MatchString(k) {
						t.Errorf("%s: key %q is not snake_case: %s", svc, k, line)
					}
					if k == "error" || k == "eventId" || k == "event" || k == "attemptId" {
						t.Errorf("%s: key %q; the common names are err, event_id, attempt_id: %s", svc, k, line)
					}
				}
				if rec["component"] == "franz-go" {
					franz++
				}
			}
			// The ingester's client always talks to the broker; the others' only when their
			// relay holds the lock, so they may have nothing to say.
			if svc == "ingester" && franz == 0 {
				t.Errorf("%s: no franz-go (kslog) line in its log stream", svc)
			}
		}
	})
}

// knownLintProblem excuses kprom's gauges named *_records_total (franz-go's names, not ours).
func knownLintProblem(metric, text string) bool {
	return regexp.MustCompile(`^bookrecon_kafka_[a-z]+_buffered_(produce|fetch)_records_total$`).MatchString(metric) &&
		strings.Contains(text, `non-counter metrics should not have "_total" suffix`)
}

// catalogue merges the services' exposition (bookrecon_* families only) with every metric kprom
// can export for their Kafka clients.
func catalogue(t *testing.T, s *stack) map[string]metricInfo {
	t.Helper()
	cat := map[string]metricInfo{}
	add := func(m metricInfo) {
		c, ok := cat[m.Name]
		if !ok {
			cat[m.Name] = m
			return
		}
		if c.Type != m.Type {
			t.Errorf("%s is a %s in one service and a %s in another", m.Name, c.Type, m.Type)
		}
		c.Labels = union(c.Labels, m.Labels)
		c.Services = union(c.Services, m.Services)
		cat[m.Name] = c
	}
	kprom := map[string]metricInfo{}
	for _, svc := range []string{"ingester", "reconciler", "escalator"} {
		for _, m := range kpromMetrics(t, svc) {
			kprom[m.Name] = m
			add(m)
		}
	}
	for _, svc := range services {
		for name, mf := range s.gather(t, svc) {
			if !strings.HasPrefix(name, "bookrecon_") {
				continue
			}
			var labels []string
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					labels = union(labels, []string{l.GetName()})
				}
			}
			if k, ok := kprom[name]; ok {
				if typeName(mf.GetType()) != k.Type {
					t.Errorf("%s: exported as %s, kprom declares %s", name, typeName(mf.GetType()), k.Type)
				}
				continue
			}
			if strings.HasPrefix(name, "bookrecon_kafka_") {
				t.Errorf("%s: a kprom metric missing from kpromObserved (stack_test.go)", name)
				continue
			}
			add(metricInfo{Name: name, Type: typeName(mf.GetType()), Help: mf.GetHelp(), Labels: labels, Services: []string{svc}})
		}
	}
	return cat
}

func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// usage is one PromQL expression of the deploy/ artefacts and who reads it.
type usage struct {
	Who    string // "alert X", "rule Y", "panel D: P"
	Expr   string
	Record string // the series a recording rule writes
}

func usages(t *testing.T) []usage {
	var out []usage
	for _, r := range rules(t) {
		if r.Alert != "" {
			out = append(out, usage{Who: "alert " + r.Alert, Expr: r.Expr})
		} else {
			out = append(out, usage{Who: "rule " + r.Record, Expr: r.Expr, Record: r.Record})
		}
	}
	for _, d := range dashboards(t) {
		short := strings.TrimPrefix(d.Title, "bookrecon / ")
		for _, q := range d.queries() {
			out = append(out, usage{Who: "panel " + short + ": " + q.Panel, Expr: q.Expr})
		}
	}
	return out
}

// usedBy maps each metric to the alerts and panels that read it, directly or through a
// recording rule.
func usedBy(t *testing.T, cat map[string]metricInfo) map[string][]string {
	types := map[string]string{}
	for n, m := range cat {
		types[n] = m.Type
	}
	us := usages(t)
	viaRule := map[string][]string{} // recorded series → metrics its rule reads
	for _, u := range us {
		if u.Record != "" {
			viaRule[u.Record] = metricNames(u.Expr, types)
		}
	}
	out := map[string][]string{}
	for _, u := range us {
		if u.Record != "" {
			continue
		}
		read := metricNames(u.Expr, types)
		for _, r := range recordedRE.FindAllString(u.Expr, -1) {
			read = append(read, viaRule[r]...)
		}
		for _, n := range read {
			out[n] = union(out[n], []string{strings.TrimPrefix(u.Who, "panel ")})
		}
	}
	return out
}

const (
	beginMarker = "<!-- BEGIN GENERATED CATALOGUE: go test ./internal/deploytest -run TestServicesExposition -update -->"
	endMarker   = "<!-- END GENERATED CATALOGUE -->"
)

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// renderCatalogue writes the generated part of docs/metrics.md.
func renderCatalogue(cat map[string]metricInfo, used map[string][]string) string {
	names := slices.Sorted(maps.Keys(cat))
	var b strings.Builder
	row := func(m metricInfo, withUse bool) {
		labels := "—"
		if len(m.Labels) > 0 {
			labels = "`" + strings.Join(m.Labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |", m.Name, m.Type, labels, strings.Join(m.Services, ", "), cell(m.Help))
		if withUse {
			u := "—"
			if len(used[m.Name]) > 0 {
				u = cell(strings.Join(used[m.Name], "; "))
			}
			fmt.Fprintf(&b, " %s |", u)
		}
		b.WriteString("\n")
	}
	b.WriteString("### Pipeline metrics\n\n")
	b.WriteString("| metric | type | labels | exported by | meaning | used by (alerts, panels) |\n| --- | --- | --- | --- | --- | --- |\n")
	n := 0
	for _, name := range names {
		if !cat[name].Kprom {
			row(cat[name], true)
			n++
		}
	}
	fmt.Fprintf(&b, "\n%d pipeline metrics.\n\n", n)
	b.WriteString("### Kafka client metrics (franz-go kprom, namespace `bookrecon_kafka`, subsystem = service)\n\n")
	b.WriteString("Registered by `internal/kafka.Options` for each service's client, with kprom's default detail\n")
	b.WriteString("(uncompressed bytes by node and topic, no latency histograms); a series appears once its event\n")
	b.WriteString("has happened (a connection, a connection error).\n\n")
	b.WriteString("| metric | type | labels | exported by | meaning | used by (alerts, panels) |\n| --- | --- | --- | --- | --- | --- |\n")
	k := 0
	for _, name := range names {
		if cat[name].Kprom {
			row(cat[name], true)
			k++
		}
	}
	fmt.Fprintf(&b, "\n%d client metrics.\n\n", k)
	return b.String()
}
