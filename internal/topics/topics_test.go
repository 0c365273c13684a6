package topics_test

import (
	"testing"

	"github.com/bookrecon/bookrecon/internal/topics"
)

// TestConfigsMinInsyncReplicas: min.insync.replicas=2 on every topic from replication factor 3
// on, the broker's default below it.
func TestConfigsMinInsyncReplicas(t *testing.T) {
	t.Parallel()
	n := topics.Default()
	for _, tt := range []struct {
		rf   int16
		want string // "" when not set
	}{{1, ""}, {2, ""}, {3, "2"}, {5, "2"}} {
		cfgs := topics.Configs(n, tt.rf)
		if len(cfgs) != len(n.All()) {
			t.Fatalf("rf %d: %d topic configs, want %d", tt.rf, len(cfgs), len(n.All()))
		}
		for topic, cfg := range cfgs {
			got := ""
			if v := cfg["min.insync.replicas"]; v != nil {
				got = *v
			}
			if got != tt.want {
				t.Errorf("rf %d: %s min.insync.replicas = %q, want %q", tt.rf, topic, got, tt.want)
			}
		}
	}
}
