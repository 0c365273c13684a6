package providertest_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/providertest"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// httpAgainstSimulator builds the HTTP adapter talking to a simulator that holds truth and
// reads its clock as now.
func httpAgainstSimulator(m *providers.Map) providertest.NewProviderFunc {
	return func(t *testing.T, truth map[string][]providers.Record, now time.Time) providers.Provider {
		t.Helper()
		sim := simulator.New(simulator.Config{Truth: truth, Map: m, Now: func() time.Time { return now }})
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)
		return providers.NewHTTP(srv.URL, srv.Client(), providers.WithClock(func() time.Time { return now }))
	}
}

// TestHTTPAdapterConformsOnSampleMap runs the suite with the sample capability map: a strong
// reference-only provider, an eventual fingerprint provider, a payment provider with a 2 s window
// and a provider with no lookups at all.
func TestHTTPAdapterConformsOnSampleMap(t *testing.T) {
	t.Parallel()
	m, err := providers.LoadMap("../testdata/providers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	providertest.Run(t, m, httpAgainstSimulator(m))
}

// TestHTTPAdapterConformsOnEdgeMap covers capability combinations the sample lacks: every lookup
// kind at once, all defaults, a sub-second window and a tight burst.
func TestHTTPAdapterConformsOnEdgeMap(t *testing.T) {
	t.Parallel()
	m, err := providers.ParseMap([]byte(`
providers:
  all-kinds:
    lookups: [fingerprint, client_reference, provider_reference]
    consistency: eventual
    consistencyWindow: 1500ms
    fingerprintWindow: 90s
    rateLimit: {rps: 1, burst: 2}
  defaults: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	providertest.Run(t, m, httpAgainstSimulator(m))
}
