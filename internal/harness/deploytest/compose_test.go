package deploytest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

type composeService struct {
	Image       string         `json:"image"`
	Build       any            `json:"build"`
	Entrypoint  []string       `json:"entrypoint"`
	Command     []string       `json:"command"`
	Environment map[string]any `json:"environment"`
	Healthcheck *struct {
		Test []string `json:"test"`
	} `json:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
	Restart string   `json:"restart"`
	Volumes []string `json:"volumes"`
}

func compose(t *testing.T) map[string]composeService {
	t.Helper()
	// Decode generically first: the file uses YAML merge keys with sequences (<<: [*a, *b]),
	// which resolve into maps but not into structs; then re-decode the resolved document.
	var raw map[string]any
	if err := yaml.Unmarshal(readFile(t, "docker-compose.yml"), &raw); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]composeService `json:"services"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml: no services")
	}
	return c.Services
}

// pinned reports whether an image reference carries an explicit tag other than latest.
func pinned(image string) bool {
	name := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(name, ":")
	return i > 0 && i < len(name)-1 && name[i+1:] != "latest"
}

var (
	envTagRE      = regexp.MustCompile(`env:"(BOOKRECON_[A-Z0-9_]+)"`)
	providerSimRE = regexp.MustCompile(`"(PROVIDER_SIM_[A-Z0-9_]+)"`)
)

// sharedFlags are the flag structs binaries embed in their cli structs, with the file that
// declares their env tags.
var sharedFlags = map[string]string{"topics.Flags": "internal/topics/names.go", "service.SharedFlags": "internal/service/flags.go"}

// binaryKeys returns the environment keys binary cmd/<bin> reads, and those it requires (kong
// `required:""`), from its non-test Go files and the sharedFlags they embed.
func binaryKeys(t *testing.T, bin string) (keys, required map[string]bool) {
	t.Helper()
	keys, required = map[string]bool{}, map[string]bool{}
	files, err := filepath.Glob(filepath.Join(root(t), "cmd", bin, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("cmd/%s: no Go files (%v)", bin, err)
	}
	for i := 0; i < len(files); i++ {
		f := files[i]
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			for embed, decl := range sharedFlags {
				if strings.TrimSpace(line) == embed && !slices.Contains(files, filepath.Join(root(t), decl)) {
					files = append(files, filepath.Join(root(t), decl))
				}
			}
			for _, m := range envTagRE.FindAllStringSubmatch(line, -1) {
				keys[m[1]] = true
				if strings.Contains(line, `required:""`) {
					required[m[1]] = true
				}
			}
			for _, m := range providerSimRE.FindAllStringSubmatch(line, -1) {
				keys[m[1]] = true
			}
		}
	}
	return keys, required
}

// TestComposeServices: every service docs/design.md#shape names is in docker-compose.yml, with
// pinned images, healthchecks on every long-running service, and depends_on conditions that
// the dependencies can meet.
func TestComposeServices(t *testing.T) {
	svcs := compose(t)
	for _, name := range []string{"kafka", "postgres", "migrate", "topics", "ingester", "reconciler", "escalator",
		"query-api", "provider-sim", "producer", "decisions-producer", "prometheus", "grafana"} {
		if _, ok := svcs[name]; !ok {
			t.Errorf("docker-compose.yml: no %s service", name)
		}
	}
	oneShot := map[string][]string{
		"migrate":  {"migrate"},
		"topics":   {"topics"},
		"tokens":   {"tokens", "init"},
		"producer": {"publish", "--paced", "/samples/attempts.jsonl"},
		"decisions-producer": {"publish", "--paced", "--topic", "booking.manual-decisions.v1", "--epoch-from",
			"/samples/attempts.jsonl", "/samples/manual-decisions.jsonl"},
	}
	for name, s := range svcs {
		if s.Image == "" || !pinned(s.Image) {
			t.Errorf("%s: image %q is not pinned to a tag (no latest)", name, s.Image)
		}
		if want, ok := oneShot[name]; ok {
			if s.Restart != "no" {
				t.Errorf("%s: a one-shot needs restart: \"no\", has %q", name, s.Restart)
			}
			if !slices.Equal(s.Command, want) || !slices.Equal(s.Entrypoint, []string{"/usr/local/bin/bookrecon"}) {
				t.Errorf("%s: runs %v %v, want bookrecon %v", name, s.Entrypoint, s.Command, want)
			}
		} else if s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
			t.Errorf("%s: no healthcheck", name)
		}
		for dep, d := range s.DependsOn {
			ds, ok := svcs[dep]
			switch {
			case !ok:
				t.Errorf("%s depends on %s, which is not a service", name, dep)
			case d.Condition == "service_healthy" && ds.Healthcheck == nil:
				t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, dep)
			case d.Condition == "service_completed_successfully" && ds.Restart != "no":
				t.Errorf("%s waits for %s to complete, which is not a one-shot", name, dep)
			case d.Condition == "":
				t.Errorf("%s depends on %s without a condition", name, dep)
			}
		}
	}
	if img := svcs["kafka"].Image; !strings.HasPrefix(img, "apache/kafka:4.") {
		t.Errorf("kafka: image %q, want apache/kafka:4.x (KRaft)", img)
	}
	if env := svcs["kafka"].Environment; fmt.Sprint(env["KAFKA_PROCESS_ROLES"]) != "broker,controller" {
		t.Errorf("kafka: KAFKA_PROCESS_ROLES = %v, want broker,controller (KRaft, one node)", env["KAFKA_PROCESS_ROLES"])
	}
	for _, name := range []string{"ingester", "reconciler", "escalator"} {
		for _, dep := range []string{"migrate", "topics"} {
			if svcs[name].DependsOn[dep].Condition != "service_completed_successfully" {
				t.Errorf("%s: must wait for %s to complete", name, dep)
			}
		}
		if svcs[name].DependsOn["kafka"].Condition != "service_healthy" || svcs[name].DependsOn["postgres"].Condition != "service_healthy" {
			t.Errorf("%s: must wait for healthy kafka and postgres", name)
		}
	}
}

// TestComposeEnvironment: every BOOKRECON_* (and PROVIDER_SIM_*) key a service sets is one its
// binary reads, and every key its binary requires is set.
func TestComposeEnvironment(t *testing.T) {
	for name, s := range compose(t) {
		if len(s.Entrypoint) == 0 || !strings.HasPrefix(s.Entrypoint[0], "/usr/local/bin/") {
			if s.Build != nil {
				t.Errorf("%s: built from the Dockerfile but no /usr/local/bin entrypoint", name)
			}
			for k := range s.Environment {
				if strings.HasPrefix(k, "BOOKRECON_") {
					t.Errorf("%s: sets %s but runs no bookrecon binary", name, k)
				}
			}
			continue
		}
		bin := strings.TrimPrefix(s.Entrypoint[0], "/usr/local/bin/")
		keys, required := binaryKeys(t, bin)
		for k := range s.Environment {
			if (strings.HasPrefix(k, "BOOKRECON_") || strings.HasPrefix(k, "PROVIDER_SIM_")) && !keys[k] {
				t.Errorf("%s: sets %s, which cmd/%s does not read", name, k, bin)
			}
		}
		for k := range required {
			if _, ok := s.Environment[k]; !ok {
				t.Errorf("%s: cmd/%s requires %s, not set", name, bin, k)
			}
		}
	}
}

// TestComposeWiring: Prometheus scrapes each service on the port its admin address is set to,
// bind mounts name folders of this repository, and Grafana's dashboards provider reads the
// folder the dashboards are mounted at.
func TestComposeWiring(t *testing.T) {
	svcs := compose(t)
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(readFile(t, "deploy/prometheus/prometheus.yml"), &prom); err != nil {
		t.Fatal(err)
	}
	jobs := map[string]bool{}
	for _, sc := range prom.ScrapeConfigs {
		jobs[sc.JobName] = true
		if !strings.HasPrefix(sc.JobName, "bookrecon-") {
			continue
		}
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, _ := strings.Cut(target, ":")
				s, ok := svcs[host]
				if !ok {
					t.Errorf("job %s scrapes %s: no such compose service", sc.JobName, target)
					continue
				}
				listens := false
				for k, v := range s.Environment {
					if strings.HasSuffix(k, "_ADDR") && fmt.Sprint(v) == "0.0.0.0:"+port {
						listens = true
					}
				}
				if !listens {
					t.Errorf("job %s scrapes %s, but %s listens on no 0.0.0.0:%s address", sc.JobName, target, host, port)
				}
			}
		}
	}
	for _, j := range []string{"bookrecon-ingester", "bookrecon-reconciler", "bookrecon-escalator", "bookrecon-query-api"} {
		if !jobs[j] {
			t.Errorf("prometheus.yml: no %s job", j)
		}
	}
	mounts := map[string]string{} // container path → host path
	for name, s := range svcs {
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 || !strings.HasPrefix(parts[0], "./") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root(t), parts[0])); err != nil {
				t.Errorf("%s: mounts %s, which does not exist", name, parts[0])
			}
			mounts[parts[1]] = parts[0]
		}
	}
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(readFile(t, "deploy/grafana/provisioning/dashboards/bookrecon.yml"), &prov); err != nil {
		t.Fatal(err)
	}
	if len(prov.Providers) != 1 || filepath.Clean(mounts[prov.Providers[0].Options.Path]) != "deploy/grafana/dashboards" {
		t.Errorf("grafana: the dashboards provider reads %v, but deploy/grafana/dashboards is mounted elsewhere (%v)", prov.Providers, mounts)
	}
	if mounts["/etc/grafana/provisioning"] != "./deploy/grafana/provisioning" || mounts["/etc/prometheus"] != "./deploy/prometheus" {
		t.Errorf("grafana provisioning or prometheus config not mounted: %v", mounts)
	}
}

// TestDockerfile: multi-stage, pinned bases, one image with every binary of cmd/.
func TestDockerfile(t *testing.T) {
	b := string(readFile(t, "Dockerfile"))
	var froms []string
	for line := range strings.Lines(b) {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.EqualFold(f[0], "FROM") {
			froms = append(froms, f[1])
			if !pinned(f[1]) {
				t.Errorf("Dockerfile: base image %s not pinned to a tag", f[1])
			}
		}
	}
	if len(froms) < 2 {
		t.Errorf("Dockerfile: %d stages, want a multi-stage build", len(froms))
	}
	if !strings.Contains(b, "./cmd/...") {
		t.Error("Dockerfile: does not build ./cmd/... (every binary)")
	}
	for name, s := range compose(t) {
		if len(s.Entrypoint) > 0 && strings.HasPrefix(s.Entrypoint[0], "/usr/local/bin/") {
			if _, err := os.Stat(filepath.Join(root(t), "cmd", strings.TrimPrefix(s.Entrypoint[0], "/usr/local/bin/"))); err != nil {
				t.Errorf("%s: runs %s, which is no cmd/ binary", name, s.Entrypoint[0])
			}
		}
	}
}
