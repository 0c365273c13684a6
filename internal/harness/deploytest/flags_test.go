package deploytest

import "testing"

// TestSharedFlagKeys: the keys of the flag structs binaries embed count as read by exactly the
// binaries that embed them (BOOKRECON_TOPIC_SUFFIX: every binary that names topics).
func TestSharedFlagKeys(t *testing.T) {
	for bin, want := range map[string]bool{"ingester": true, "reconciler": true, "escalator": true, "bookrecon": true,
		"query-api": false, "provider-sim": false} {
		keys, required := binaryKeys(t, bin)
		if keys["BOOKRECON_TOPIC_SUFFIX"] != want || required["BOOKRECON_TOPIC_SUFFIX"] {
			t.Errorf("cmd/%s: reads BOOKRECON_TOPIC_SUFFIX = %v (required %v), want %v (not required)",
				bin, keys["BOOKRECON_TOPIC_SUFFIX"], required["BOOKRECON_TOPIC_SUFFIX"], want)
		}
	}
}
