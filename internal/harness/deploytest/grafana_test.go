package deploytest

import (
	"testing"

	"github.com/goccy/go-yaml"
)

// provisionedUID returns the uid of the one provisioned Prometheus data source.
func provisionedUID(t *testing.T) string {
	t.Helper()
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name string `yaml:"name"`
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(readFile(t, "deploy/grafana/provisioning/datasources/prometheus.yml"), &ds); err != nil {
		t.Fatal(err)
	}
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].UID == "" {
		t.Fatalf("datasource provisioning: want apiVersion 1 and one prometheus data source with a uid, got %+v", ds)
	}
	return ds.Datasources[0].UID
}

// TestDashboards: the four dashboards are valid JSON with unique uids, every panel, target and
// variable names the provisioned data source uid, and every target has a query.
func TestDashboards(t *testing.T) {
	uid := provisionedUID(t)
	var prov struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type string `yaml:"type"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(readFile(t, "deploy/grafana/provisioning/dashboards/bookrecon.yml"), &prov); err != nil {
		t.Fatal(err)
	}
	if prov.APIVersion != 1 || len(prov.Providers) != 1 || prov.Providers[0].Type != "file" {
		t.Errorf("dashboards provisioning: want apiVersion 1 and one file provider, got %+v", prov)
	}
	uids := map[string]bool{}
	for _, d := range dashboards(t) {
		if d.UID == "" || uids[d.UID] {
			t.Errorf("%s: uid %q missing or not unique", d.File, d.UID)
		}
		uids[d.UID] = true
		qs := d.queries()
		if len(qs) == 0 {
			t.Errorf("%s: no query", d.File)
		}
		for _, q := range qs {
			if q.Expr == "" {
				t.Errorf("%s / %s: empty query", d.File, q.Panel)
			}
			if q.DatasourceUID != uid {
				t.Errorf("%s / %s: datasource uid %q, want the provisioned %q", d.File, q.Panel, q.DatasourceUID, uid)
			}
			if q.PanelDSUID != "" && q.PanelDSUID != uid {
				t.Errorf("%s / %s: panel datasource uid %q, want %q", d.File, q.Panel, q.PanelDSUID, uid)
			}
		}
		ids := map[float64]bool{}
		var walk func([]any)
		walk = func(ps []any) {
			for _, p := range ps {
				pm, _ := p.(map[string]any)
				id, _ := pm["id"].(float64)
				if ids[id] {
					t.Errorf("%s: panel id %v twice", d.File, id)
				}
				ids[id] = true
				if pm["type"] != "row" && dsUID(pm["datasource"]) != uid {
					t.Errorf("%s / %v: panel datasource uid %q, want %q", d.File, pm["title"], dsUID(pm["datasource"]), uid)
				}
				if sub, ok := pm["panels"].([]any); ok {
					walk(sub)
				}
			}
		}
		ps, _ := d.Raw["panels"].([]any)
		walk(ps)
	}
	for _, want := range []string{"bookrecon-overview", "bookrecon-unknown", "bookrecon-providers", "bookrecon-escalations"} {
		if !uids[want] {
			t.Errorf("no dashboard with uid %s", want)
		}
	}
}
