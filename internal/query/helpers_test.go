package query_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/auth/authtest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/query"
	"github.com/bookrecon/bookrecon/providers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testMap has a provider at the default maxVersions (3), one that caps versions at 2, and one
// without lookups.
const testMap = `providers:
  sim-hotels:
    lookups: [provider_reference, client_reference]
    authoritativeNotFound: true
  sim-pay:
    lookups: [provider_reference, client_reference]
    authoritativeNotFound: true
  tight:
    lookups: [provider_reference]
    maxVersions: 2
  sim-legacy:
    lookups: []
`

// bundle is one test's database, capability map, tokens, API and clock.
type bundle struct {
	pool   *pgxpool.Pool
	caps   *providers.Map
	cfg    *attempt.Config
	tokens *auth.Tokens
	// token is an attempts:read token by tenant (t_1, t_2); writer is a t_2 token with
	// attempts:write only.
	token  map[string]string
	writer string
	api    *query.API
	reg    *prometheus.Registry
	now    time.Time // the pipeline's reference time: events occur around it
}

func setup(t *testing.T) *bundle {
	t.Helper()
	caps, err := providers.ParseMap([]byte(testMap))
	if err != nil {
		t.Fatal(err)
	}
	pol := map[string]attempt.Policy{}
	for _, n := range caps.Names() {
		c, _ := caps.Get(n)
		p := attempt.Policy{MaxVersions: c.MaxVersions}
		for _, l := range c.Lookups {
			p.Lookups = append(p.Lookups, string(l))
		}
		pol[n] = p
	}
	b := &bundle{pool: pgtest.NewPool(t), caps: caps, cfg: &attempt.Config{Policies: pol},
		reg: prometheus.NewRegistry(), now: time.Now().UTC().Truncate(time.Millisecond)}
	var toks []string
	b.tokens, toks = authtest.Open(t, authtest.Reader("t_1", "checkout"), authtest.Reader("t_2", "checkout"),
		authtest.Grant{Tenant: "t_2", Principal: "producer", Scopes: []auth.Scope{auth.ScopeAttemptsWrite}})
	b.token, b.writer = map[string]string{"t_1": toks[0], "t_2": toks[1]}, toks[2]
	b.api, err = query.New(query.Config{Providers: caps, Tokens: b.tokens}, b.pool, slog.New(slog.DiscardHandler), b.reg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ev describes one attempt event; the zero values are filled in by (*bundle).apply.
type ev struct {
	typ      events.EventType
	tenant   string // default t_1
	intent   string
	op       events.Operation // default BOOK
	subject  string           // default the intent
	version  int              // default 1
	provider string           // default sim-hotels
	at       time.Duration    // occurredAt = bundle.now + at
	outcome  map[string]any
}

func (b *bundle) record(t *testing.T, e ev) []byte {
	t.Helper()
	if e.tenant == "" {
		e.tenant = "t_1"
	}
	if e.op == "" {
		e.op = events.OpBook
	}
	if e.subject == "" {
		e.subject = e.intent
	}
	if e.version == 0 {
		e.version = 1
	}
	if e.provider == "" {
		e.provider = "sim-hotels"
	}
	m := map[string]any{"specVersion": 1, "eventId": uuid.NewString(), "eventType": e.typ,
		"occurredAt": b.now.Add(e.at).Format(time.RFC3339Nano), "tenantId": e.tenant, "bookingIntentId": e.intent,
		"operation": e.op, "operationVersion": e.version, "provider": e.provider,
		"idempotencyKey": fmt.Sprintf("%s:%s:v%d", e.op.KeyPrefix(), e.subject, e.version)}
	if e.typ == events.EventStarted {
		req := map[string]any{"offerVersion": "off_1:1", "travellerRef": "tr_1", "amount": map[string]any{"value": "100.00", "currency": "EUR"}}
		if e.op.HasFingerprint() {
			req["stay"] = map[string]any{"propertyId": "h_1", "checkIn": "2027-02-03", "checkOut": "2027-02-06"}
		}
		m["request"] = req
		m["recovery"] = map[string]any{"clientReference": "cr_" + e.intent}
	} else {
		m["outcome"] = e.outcome
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// apply runs each event through the ingester's state machine (attempt.Tx.ApplyEvent), one
// transaction each.
func (b *bundle) apply(t *testing.T, es ...ev) {
	t.Helper()
	ctx := context.Background()
	for _, e := range es {
		a, err := events.DecodeAttempt(b.record(t, e), events.DecodeOptions{KnownProvider: b.caps.Known})
		if err != nil {
			t.Fatalf("decode %s: %v", e.typ, err)
		}
		if err := postgres.WithTx(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := attempt.NewTx(tx, b.cfg).ApplyEvent(ctx, a, events.DefaultTransportTimeoutCodes())
			return err
		}); err != nil {
			t.Fatalf("apply %s: %v", e.typ, err)
		}
	}
}

// settle applies a reconciler verdict to the attempt (tenant t_1, key) as internal/reconcile
// does: attempt.Tx.Settle under the intent lock.
func (b *bundle) settle(t *testing.T, intent, key string, s attempt.Settlement) {
	t.Helper()
	ctx := context.Background()
	if err := postgres.WithTx(ctx, b.pool, func(tx pgx.Tx) error {
		at := attempt.NewTx(tx, b.cfg)
		if err := at.LockIntent(ctx, "t_1", intent); err != nil {
			return err
		}
		a, err := at.ByKey(ctx, "t_1", key)
		if err != nil {
			return err
		}
		_, err = at.Settle(ctx, a, s)
		return err
	}); err != nil {
		t.Fatalf("settle %s: %v", key, err)
	}
}

// decide applies a manual decision (decoded with events.DecodeDecision) as the ingester does.
func (b *bundle) decide(t *testing.T, intent, key string, fields map[string]any) {
	t.Helper()
	ctx := context.Background()
	m := map[string]any{"specVersion": 1, "eventId": uuid.NewString(), "eventType": "decision.recorded",
		"occurredAt": b.now.Format(time.RFC3339Nano), "tenantId": "t_1", "bookingIntentId": intent,
		"idempotencyKey": key, "actor": "ops.agent.07", "reason": "checked with the provider"}
	for k, v := range fields {
		m[k] = v
	}
	raw, _ := json.Marshal(m)
	d, err := events.DecodeDecision(raw, events.DecodeOptions{})
	if err != nil {
		t.Fatalf("decode decision: %v", err)
	}
	if err := postgres.WithTx(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := attempt.NewTx(tx, b.cfg).ApplyDecision(ctx, d)
		return err
	}); err != nil {
		t.Fatalf("apply decision: %v", err)
	}
}

// get serves one GET through the API as a reader of the path's tenant (t_1's for any other
// tenant) and returns the status code and body; the Content-Type must be application/json for
// a 200 and application/problem+json otherwise.
func (b *bundle) get(t *testing.T, path string) (int, string) {
	t.Helper()
	tenant, _, _ := strings.Cut(strings.TrimPrefix(path, "/v1/tenants/"), "/")
	return b.getAs(t, cmp.Or(b.token[tenant], b.token["t_1"]), path)
}

// getAs serves one GET through the API with Authorization: Bearer token ("": none).
func (b *bundle) getAs(t *testing.T, token, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	b.api.ServeHTTP(rec, req)
	want := "application/json"
	if rec.Code != http.StatusOK {
		want = "application/problem+json"
	}
	if ct := rec.Header().Get("Content-Type"); ct != want {
		t.Errorf("GET %s: Content-Type %q, want %s", path, ct, want)
	}
	return rec.Code, rec.Body.String()
}

// Event shorthands.
func started(intent string, version int, at time.Duration) ev {
	return ev{typ: events.EventStarted, intent: intent, version: version, at: at}
}

func failedEv(intent string, version int, at time.Duration, retryable bool) ev {
	return ev{typ: events.EventFailed, intent: intent, version: version, at: at,
		outcome: map[string]any{"failureCode": "SOLD_OUT", "retryable": retryable}}
}

func unknownEv(intent string, version int, at time.Duration) ev {
	return ev{typ: events.EventOutcomeUnknown, intent: intent, version: version, at: at,
		outcome: map[string]any{"timeoutClass": "read_timeout"}}
}

func succeededEv(intent string, version int, at time.Duration, ref string) ev {
	return ev{typ: events.EventSucceeded, intent: intent, version: version, at: at,
		outcome: map[string]any{"providerReference": ref}}
}
