package simulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/providers"
)

// Truth is what each simulated provider really holds: provider name → its records. Record
// fingerprints are in events.Fingerprint form.
type Truth map[string][]providers.Record

// ErrInvalidTruth is wrapped by every error [LoadTruth], [ParseTruth] and [Server.AddTruth]
// return for truth that does not parse or validate.
var ErrInvalidTruth = errors.New("simulator: invalid truth")

// truthRecord is one record in the format of samples/provider-truth.json.
type truthRecord struct {
	ProviderReference string            `json:"providerReference"`
	ClientReference   *string           `json:"clientReference"`
	Status            string            `json:"status"`
	CreatedAt         string            `json:"createdAt"`
	Fingerprint       *truthFingerprint `json:"fingerprint"`
}

// truthFingerprint is the traveller and stay or segments a fingerprint is computed from.
type truthFingerprint struct {
	TravellerRef string         `json:"travellerRef"`
	PropertyID   string         `json:"propertyId"`
	CheckIn      string         `json:"checkIn"`
	CheckOut     string         `json:"checkOut"`
	Segments     []truthSegment `json:"segments"`
}

type truthSegment struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Date   string `json:"date"`
	Flight string `json:"flight"`
}

// LoadTruth reads the truth file at path; see [ParseTruth].
func LoadTruth(path string) (Truth, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("simulator: read truth: %w", err)
	}
	t, err := ParseTruth(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ParseTruth parses truth in the format of samples/provider-truth.json: an object mapping each
// provider name to a list of records
//
//	{"providerReference": "HTL-30303", "clientReference": "cr_sc03" | null,
//	 "status": "CONFIRMED" | "PENDING" | "REJECTED" | "CANCELLED",
//	 "createdAt": RFC 3339,
//	 "fingerprint": {"travellerRef", "propertyId", "checkIn", "checkOut"}
//	              | {"travellerRef", "segments": [{"from", "to", "date", "flight"}]} | null}
//
// A fingerprint object becomes events.Fingerprint(events.OpBook, request). Unknown fields are
// errors; every record problem is reported at once, all wrapping [ErrInvalidTruth]. createdAt is
// kept as written: [Config.Shift] moves it when a [Server] starts.
func ParseTruth(data []byte) (Truth, error) {
	return parseTruth(data, time.Time{})
}

// parseTruth parses truth; a record without createdAt takes now, unless now is zero.
func parseTruth(data []byte, now time.Time) (Truth, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw map[string][]truthRecord
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidTruth, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrInvalidTruth)
	}
	t := make(Truth, len(raw))
	var problems []error
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		seen := map[string]bool{}
		recs := make([]providers.Record, 0, len(raw[name]))
		for i, tr := range raw[name] {
			path := fmt.Sprintf("%s[%d]", name, i)
			rec, errs := tr.record(path, now)
			problems = append(problems, errs...)
			if rec.ProviderReference != "" {
				if seen[rec.ProviderReference] {
					problems = append(problems, fmt.Errorf("%s: duplicate providerReference %q", path, rec.ProviderReference))
				}
				seen[rec.ProviderReference] = true
			}
			recs = append(recs, rec)
		}
		t[name] = recs
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w:\n%w", ErrInvalidTruth, errors.Join(problems...))
	}
	return t, nil
}

func (tr truthRecord) record(path string, now time.Time) (providers.Record, []error) {
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	rec := providers.Record{ProviderReference: tr.ProviderReference, Status: providers.RecordStatus(tr.Status)}
	if tr.ProviderReference == "" {
		bad("missing providerReference")
	}
	if tr.ClientReference != nil {
		if *tr.ClientReference == "" {
			bad("clientReference must be null or non-empty")
		}
		rec.ClientReference = *tr.ClientReference
	}
	if !rec.Status.Valid() {
		bad("status %q is not one of %v", tr.Status, providers.RecordStatuses())
	}
	switch {
	case tr.CreatedAt == "" && !now.IsZero():
		rec.CreatedAt = now
	case tr.CreatedAt == "":
		bad("missing createdAt")
	default:
		t, err := time.Parse(time.RFC3339Nano, tr.CreatedAt)
		if err != nil {
			bad("createdAt %q is not RFC 3339", tr.CreatedAt)
		}
		rec.CreatedAt = t
	}
	if tr.Fingerprint != nil {
		fp, err := tr.Fingerprint.fingerprint()
		if err != nil {
			bad("fingerprint: %v", err)
		}
		rec.Fingerprint = fp
	}
	return rec, problems
}

// fingerprint converts the object into a BOOK request and hashes it with events.Fingerprint.
func (f truthFingerprint) fingerprint() (string, error) {
	hasStay := f.PropertyID != "" || f.CheckIn != "" || f.CheckOut != ""
	switch {
	case f.TravellerRef == "":
		return "", errors.New("missing travellerRef")
	case hasStay && len(f.Segments) > 0:
		return "", errors.New("has both a stay and segments")
	case !hasStay && len(f.Segments) == 0:
		return "", errors.New("needs a stay (propertyId, checkIn, checkOut) or segments")
	case hasStay && (f.PropertyID == "" || f.CheckIn == "" || f.CheckOut == ""):
		return "", errors.New("a stay needs propertyId, checkIn and checkOut")
	}
	req := &events.Request{TravellerRef: f.TravellerRef}
	if hasStay {
		req.Stay = &events.Stay{PropertyID: f.PropertyID, CheckIn: f.CheckIn, CheckOut: f.CheckOut}
	}
	for i, s := range f.Segments {
		if s.From == "" || s.To == "" || s.Date == "" || s.Flight == "" {
			return "", fmt.Errorf("segments[%d] needs from, to, date and flight", i)
		}
		req.Segments = append(req.Segments, events.Segment{From: s.From, To: s.To, Date: s.Date, Flight: s.Flight})
	}
	fp := events.Fingerprint(events.OpBook, req)
	if fp == "" {
		return "", errors.New("events.Fingerprint gave no fingerprint")
	}
	return fp, nil
}
