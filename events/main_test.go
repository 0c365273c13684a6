package events

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// samplesDir is the repository copy of the samples (samples/) seen from the package directory.
const samplesDir = "../samples/"

// sampleProviders are the four providers of samples/providers.yaml.
var sampleProviders = map[string]bool{"sim-hotels": true, "sim-air": true, "sim-pay": true, "sim-legacy": true}

func knownSampleProvider(name string) bool { return sampleProviders[name] }

// sampleLines returns the lines of a samples file (bufio.Scanner would choke on the 70 KB line).
func sampleLines(tb testing.TB, name string) [][]byte {
	tb.Helper()
	b, err := os.ReadFile(samplesDir + name)
	if err != nil {
		tb.Fatalf("read samples: %v", err)
	}
	return bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
}

// Base records, one per shape, taken from samples/attempts.jsonl.
const (
	hotelStarted  = `{"specVersion":1,"eventId":"evt_0001","eventType":"attempt.started","occurredAt":"2026-11-30T09:00:00.000Z","tenantId":"t_globetrek","bookingIntentId":"bi_sc01","operation":"BOOK","operationVersion":1,"idempotencyKey":"book:bi_sc01:v1","provider":"sim-hotels","request":{"offerVersion":"off_1:1","travellerRef":"tr_0001","stay":{"propertyId":"h_1042","checkIn":"2027-02-03","checkOut":"2027-02-06"},"amount":{"value":"249.90","currency":"EUR"}},"recovery":{"clientReference":"cr_sc01","correlationId":"corr_sc01"}}`
	flightStarted = `{"specVersion":1,"eventId":"evt_0011","eventType":"attempt.started","occurredAt":"2026-11-30T09:00:09.000Z","tenantId":"t_globetrek","bookingIntentId":"bi_sc06","operation":"BOOK","operationVersion":1,"idempotencyKey":"book:bi_sc06:v1","provider":"sim-air","request":{"offerVersion":"off_2:1","travellerRef":"tr_0007","segments":[{"from":"IST","to":"LHR","date":"2027-01-14","flight":"XQ101"}],"amount":{"value":"420.00","currency":"EUR"}},"recovery":{"clientReference":"cr_sc06"}}`
	authStarted   = `{"specVersion":1,"eventId":"evt_0032","eventType":"attempt.started","occurredAt":"2026-11-30T09:00:31.000Z","tenantId":"t_globetrek","bookingIntentId":"bi_sc14","operation":"PAYMENT_AUTHORIZE","operationVersion":1,"idempotencyKey":"authorize:bi_sc14:v1","provider":"sim-pay","request":{"offerVersion":"off_14:1","travellerRef":"tr_0015","amount":{"value":"24990","currency":"TRY"}},"recovery":{"clientReference":"cr_sc14_auth","paymentReference":"pay_sc14"}}`
	cancelStarted = `{"specVersion":1,"eventId":"evt_0036","eventType":"attempt.started","occurredAt":"2026-11-30T09:00:35.000Z","tenantId":"t_globetrek","bookingIntentId":"bi_sc15","operation":"CANCEL","operationVersion":1,"idempotencyKey":"cancel:bk_sc15:v1","provider":"sim-hotels","request":{"offerVersion":"off_15:1","travellerRef":"tr_0016","amount":{"value":"0","currency":"EUR"}},"recovery":{"clientReference":"cr_sc15_cancel","providerReference":"HTL-15150"}}`
	succeeded     = `{"specVersion":1,"eventId":"evt_0002","eventType":"attempt.succeeded","occurredAt":"2026-11-30T09:00:01.000Z","tenantId":"t_globetrek","bookingIntentId":"bi_sc01","operation":"BOOK","operationVersion":1,"idempotencyKey":"book:bi_sc01:v1","provider":"sim-hotels","outcome":{"providerReference":"HTL-10101"}}`
	failed        = `{"specVersion":1,"eventId":"evt_0030","eventType":"attempt.failed","occurredAt":"2026-11-30T09:00:29.000Z","tenantId":"t_globetrek","bookingIntentId":"bi_sc13","operation":"BOOK","operationVersion":1,"idempotencyKey":"book:bi_sc13:v1","provider":"sim-hotels","outcome":{"failureCode":"SOLD_OUT","retryable":false}}`
	unknown       = `{"specVersion":1,"eventId":"evt_0018","eventType":"attempt.outcome_unknown","occurredAt":"2026-11-30T09:00:45.000Z","tenantId":"t_globetrek","bookingIntentId":"bi_sc09","operation":"BOOK","operationVersion":1,"idempotencyKey":"book:bi_sc09:v1","provider":"sim-hotels","outcome":{"timeoutClass":"business_timeout","requestSent":true,"providerReference":"HTL-90909"}}`
	decision      = `{"specVersion":1,"eventId":"dec_0001","eventType":"decision.recorded","occurredAt":"2026-11-30T09:01:30.000Z","tenantId":"t_globetrek","bookingIntentId":"bi_sc20","idempotencyKey":"book:bi_sc20:v1","decision":"CONFIRMED","providerReference":"LEG-2020","actor":"ops.agent.07","reason":"verified with the property by phone"}`
)

// edit changes a record decoded into maps, slices and json.Number (numbers keep their text).
type edit func(tb testing.TB, m map[string]any)

// set sets the member at a dotted path ("request.segments.0.from"); numeric parts index arrays.
func set(path string, v any) edit {
	return func(tb testing.TB, m map[string]any) {
		parent, last := walk(tb, m, path)
		switch p := parent.(type) {
		case map[string]any:
			p[last] = v
		case []any:
			i, _ := strconv.Atoi(last)
			p[i] = v
		}
	}
}

// del removes the member at a dotted path.
func del(path string) edit {
	return func(tb testing.TB, m map[string]any) {
		parent, last := walk(tb, m, path)
		delete(parent.(map[string]any), last)
	}
}

func walk(tb testing.TB, m map[string]any, path string) (any, string) {
	tb.Helper()
	parts := strings.Split(path, ".")
	var cur any = m
	for _, p := range parts[:len(parts)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			i, _ := strconv.Atoi(p)
			cur = c[i]
		default:
			tb.Fatalf("path %s: %s is not a container", path, p)
		}
	}
	return cur, parts[len(parts)-1]
}

// mutate returns base with edits applied, re-encoded.
func mutate(tb testing.TB, base string, edits ...edit) []byte {
	tb.Helper()
	if len(edits) == 0 {
		return []byte(base)
	}
	dec := json.NewDecoder(strings.NewReader(base))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		tb.Fatalf("base record: %v", err)
	}
	for _, e := range edits {
		e(tb, m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		tb.Fatalf("marshal: %v", err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

func mustTime(tb testing.TB, s string) time.Time {
	tb.Helper()
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}
