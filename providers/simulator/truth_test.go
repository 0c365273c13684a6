package simulator_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	sampleTruth = "../testdata/provider-truth.json"
	sampleMap   = "../testdata/providers.yaml"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// tr0008 is the fingerprint of sc07's request: tr_0008 on XQ310 SAW-AMS, 2027-02-02.
var tr0008 = events.Fingerprint(events.OpBook, &events.Request{
	TravellerRef: "tr_0008",
	Segments:     []events.Segment{{From: "SAW", To: "AMS", Date: "2027-02-02", Flight: "XQ310"}},
})

func TestLoadTruthSample(t *testing.T) {
	t.Parallel()
	truth, err := simulator.LoadTruth(sampleTruth)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for name, recs := range truth {
		counts[name] = len(recs)
	}
	if diff := cmp.Diff(map[string]int{"sim-hotels": 6, "sim-air": 4, "sim-pay": 1}, counts); diff != "" {
		t.Errorf("record counts mismatch (-want +got):\n%s", diff)
	}
	if len(tr0008) != 64 {
		t.Fatalf("events.Fingerprint gave %q", tr0008)
	}
	want := map[string]providers.Record{
		"HTL-30303": {
			ProviderReference: "HTL-30303", ClientReference: "cr_sc03", Status: providers.StatusConfirmed,
			CreatedAt: at("2026-11-30T09:00:06Z"),
			Fingerprint: events.Fingerprint(events.OpBook, &events.Request{TravellerRef: "tr_0004",
				Stay: &events.Stay{PropertyID: "h_3001", CheckIn: "2027-01-20", CheckOut: "2027-01-22"}}),
		},
		"HTL-90909": {
			ProviderReference: "HTL-90909", Status: providers.StatusConfirmed, CreatedAt: at("2026-11-30T09:00:16Z"),
			Fingerprint: events.Fingerprint(events.OpBook, &events.Request{TravellerRef: "tr_0010",
				Stay: &events.Stay{PropertyID: "h_9009", CheckIn: "2027-06-10", CheckOut: "2027-06-14"}}),
		},
		"HTL-22222": {
			ProviderReference: "HTL-22222", ClientReference: "cr_sc22", Status: providers.StatusRejected,
			CreatedAt: at("2026-11-30T09:00:53Z"),
			Fingerprint: events.Fingerprint(events.OpBook, &events.Request{TravellerRef: "tr_0022",
				Stay: &events.Stay{PropertyID: "h_2222", CheckIn: "2027-04-22", CheckOut: "2027-04-25"}}),
		},
		"AIR-7AAAAA": {ProviderReference: "AIR-7AAAAA", Status: providers.StatusConfirmed, CreatedAt: at("2026-11-30T09:00:12Z"), Fingerprint: tr0008},
		"AIR-7BBBBB": {ProviderReference: "AIR-7BBBBB", Status: providers.StatusConfirmed, CreatedAt: at("2026-11-30T09:00:13Z"), Fingerprint: tr0008},
		"PAY-C-1414": {ProviderReference: "PAY-C-1414", ClientReference: "cr_sc14_cap", Status: providers.StatusConfirmed, CreatedAt: at("2026-11-30T09:00:34Z")},
	}
	got := map[string]providers.Record{}
	for _, recs := range truth {
		for _, r := range recs {
			if _, ok := want[r.ProviderReference]; ok {
				got[r.ProviderReference] = r
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records mismatch (-want +got):\n%s", diff)
	}
}

func TestParseTruthReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := simulator.ParseTruth([]byte(`{
  "p": [
    {"providerReference": "", "clientReference": "", "status": "BOOKED", "createdAt": "yesterday", "fingerprint": null},
    {"providerReference": "A", "clientReference": null, "status": "PENDING", "createdAt": "2026-11-30T09:00:00Z",
     "fingerprint": {"travellerRef": "tr", "propertyId": "h", "checkIn": "2027-01-01", "checkOut": "2027-01-02",
                     "segments": [{"from": "IST", "to": "LHR", "date": "2027-01-01", "flight": "XQ1"}]}},
    {"providerReference": "A", "status": "PENDING", "createdAt": "2026-11-30T09:00:00Z",
     "fingerprint": {"travellerRef": "tr", "propertyId": "h"}},
    {"providerReference": "B", "status": "PENDING", "createdAt": "2026-11-30T09:00:00Z",
     "fingerprint": {"segments": [{"from": "IST"}]}},
    {"providerReference": "C", "status": "PENDING",
     "fingerprint": {"travellerRef": "tr", "segments": [{"from": "IST", "to": "LHR", "date": "2027-01-01"}]}}
  ]}`))
	if !errors.Is(err, simulator.ErrInvalidTruth) {
		t.Fatalf("ParseTruth = %v, want ErrInvalidTruth", err)
	}
	for _, want := range []string{
		`p[0]: missing providerReference`,
		`p[0]: clientReference must be null or non-empty`,
		`p[0]: status "BOOKED" is not one of [CONFIRMED PENDING REJECTED CANCELLED]`,
		`p[0]: createdAt "yesterday" is not RFC 3339`,
		`p[1]: fingerprint: has both a stay and segments`,
		`p[2]: fingerprint: a stay needs propertyId, checkIn and checkOut`,
		`p[2]: duplicate providerReference "A"`,
		`p[3]: fingerprint: missing travellerRef`,
		`p[4]: missing createdAt`,
		`p[4]: fingerprint: segments[0] needs from, to, date and flight`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
}

func TestParseTruthRejectsBadJSON(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`[]`,
		`{"p": [{"providerReference": "A", "status": "PENDING", "createdAt": "2026-11-30T09:00:00Z", "colour": "red"}]}`,
		`{"p": []} {}`,
		`{`,
	} {
		if _, err := simulator.ParseTruth([]byte(doc)); !errors.Is(err, simulator.ErrInvalidTruth) {
			t.Errorf("ParseTruth(%s) = %v, want ErrInvalidTruth", doc, err)
		}
	}
	if _, err := simulator.LoadTruth(t.TempDir() + "/missing.json"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadTruth(missing) = %v, want os.ErrNotExist", err)
	}
}
