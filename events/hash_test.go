package events

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// sc01Hash is the request hash of sample sc01 (evt_0001), checked once against
// `printf '%s' "$sc01Canonical" | sha256sum`.
const (
	sc01Canonical = `{"amount":{"currency":"EUR","minor":24990},"offerVersion":"off_1:1","operation":"BOOK","stay":{"checkIn":"2027-02-03","checkOut":"2027-02-06","propertyId":"h_1042"},"travellerRef":"tr_0001"}`
	sc01Hash      = "eab2b0fe2377394b2f734ae10f87ccbbadc7d705d56be55a91b2c2939abf89b5"
)

func sc01Request() *Request {
	return &Request{
		OfferVersion: "off_1:1", TravellerRef: "tr_0001",
		Amount: &Amount{Value: "249.90", Currency: "EUR"},
		Stay:   &Stay{PropertyID: "h_1042", CheckIn: "2027-02-03", CheckOut: "2027-02-06"},
	}
}

func mustHash(tb testing.TB, raw []byte) string {
	tb.Helper()
	a, err := DecodeAttempt(raw, DecodeOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	h, err := a.Hash()
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

func TestRequestHashGolden(t *testing.T) {
	t.Parallel()

	c, err := CanonicalRequest(OpBook, sc01Request())
	if err != nil || string(c) != sc01Canonical {
		t.Fatalf("CanonicalRequest = %s, %v\nwant %s", c, err, sc01Canonical)
	}
	if h, err := RequestHash(OpBook, sc01Request()); err != nil || h != sc01Hash {
		t.Fatalf("RequestHash = %s, %v; want %s", h, err, sc01Hash)
	}
	if h := mustHash(t, []byte(hotelStarted)); h != sc01Hash {
		t.Fatalf("decoded sc01 hash = %s, want %s", h, sc01Hash)
	}
}

func TestRequestHashAmountForms(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		value any
	}{
		{"String249.9", "249.9"},
		{"String249.90", "249.90"},
		{"String249.900", "249.900"},
		{"Number249.90", json.Number("249.90")},
		{"Number249.9", json.Number("249.9")},
		{"NumberExponent", json.Number("2.4990e2")},
		{"StringExponent", "24990e-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			if h := mustHash(t, mutate(t, hotelStarted, set("request.amount.value", tt.value))); h != sc01Hash {
				t.Errorf("hash = %s, want %s", h, sc01Hash)
			}
		})
	}
}

func TestRequestHashIgnoresLayout(t *testing.T) {
	t.Parallel()

	reordered := `{
	  "request": {
	    "channel": "mobile-app",
	    "amount": { "currency": "EUR", "value": 249.9 },
	    "stay": { "checkOut": "2027-02-06", "propertyId": "h_1042", "checkIn": "2027-02-03" },
	    "travellerRef": "tr_0001", "offerVersion": "off_1:1"
	  },
	  "provider": "sim-hotels", "idempotencyKey": "book:bi_sc01:v1", "operationVersion": 1,
	  "operation": "BOOK", "bookingIntentId": "bi_sc01", "tenantId": "t_globetrek",
	  "occurredAt": "2026-11-30T09:00:00.000Z", "eventType": "attempt.started",
	  "eventId": "evt_other", "specVersion": 1
	}`
	if h := mustHash(t, []byte(reordered)); h != sc01Hash {
		t.Errorf("hash = %s, want %s", h, sc01Hash)
	}

	// sc11: evt_0023 repeats evt_0022 with reordered members, a JSON number and an extra field.
	var h22, h23 string
	for _, line := range sampleLines(t, "attempts.jsonl") {
		switch {
		case strings.Contains(string(line), `"eventId":"evt_0022"`):
			h22 = mustHash(t, line)
		case strings.Contains(string(line), `"eventId":"evt_0023"`):
			h23 = mustHash(t, line)
		}
	}
	if h22 == "" || h22 != h23 {
		t.Errorf("sc11 hashes %q and %q, want equal", h22, h23)
	}
}

func TestRequestHashDistinguishes(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		raw  []byte
	}{
		{"Amount", mutate(t, hotelStarted, set("request.amount.value", "259.90"))},
		{"Currency", mutate(t, hotelStarted, set("request.amount.currency", "USD"))},
		{"Offer", mutate(t, hotelStarted, set("request.offerVersion", "off_1:2"))},
		{"Traveller", mutate(t, hotelStarted, set("request.travellerRef", "tr_0002"))},
		{"CheckOut", mutate(t, hotelStarted, set("request.stay.checkOut", "2027-02-07"))},
		{"Property", mutate(t, hotelStarted, set("request.stay.propertyId", "h_1043"))},
		{"Operation", mutate(t, hotelStarted, set("operation", "MODIFY"), set("idempotencyKey", "modify:bk_1:v1"))},
	}
	seen := map[string]string{sc01Hash: "sc01"}
	for _, tt := range tests {
		h := mustHash(t, tt.raw)
		if prev, dup := seen[h]; dup {
			t.Errorf("%s hashes like %s", tt.name, prev)
		}
		seen[h] = tt.name
	}

	twoLegs := []Segment{{From: "IST", To: "LHR", Date: "2027-01-14", Flight: "XQ101"},
		{From: "LHR", To: "IST", Date: "2027-01-20", Flight: "XQ102"}}
	r := &Request{OfferVersion: "o", TravellerRef: "t", Amount: &Amount{Value: "1", Currency: "EUR"}, Segments: twoLegs}
	forward, _ := RequestHash(OpBook, r)
	r.Segments = []Segment{twoLegs[1], twoLegs[0]}
	backward, _ := RequestHash(OpBook, r)
	if forward == backward {
		t.Error("segment order does not change the hash")
	}
}

func TestRequestHashMembers(t *testing.T) {
	t.Parallel()

	stay := &Stay{PropertyID: "h_1", CheckIn: "2027-01-01", CheckOut: "2027-01-02"}
	tests := []struct {
		name string
		op   Operation
		r    *Request
		want string
	}{
		{"PaymentIgnoresStay", OpPaymentAuthorize,
			&Request{OfferVersion: "off_14:1", TravellerRef: "tr_0015", Amount: &Amount{Value: "24990", Currency: "TRY"}, Stay: stay},
			`{"amount":{"currency":"TRY","minor":2499000},"offerVersion":"off_14:1","operation":"PAYMENT_AUTHORIZE","travellerRef":"tr_0015"}`},
		{"AbsentOmitted", OpCancel, &Request{},
			`{"operation":"CANCEL"}`},
		{"ModifyKeepsSegments", OpModify,
			&Request{TravellerRef: "t", Segments: []Segment{{From: "ist", To: "LHR", Date: "2027-01-14", Flight: "XQ101"}}},
			`{"operation":"MODIFY","segments":[{"date":"2027-01-14","flight":"XQ101","from":"ist","to":"LHR"}],"travellerRef":"t"}`},
		{"KuwaitiDinar", OpRefund, &Request{Amount: &Amount{Value: "1.234", Currency: "KWD"}},
			`{"amount":{"currency":"KWD","minor":1234},"operation":"REFUND"}`},
		{"EscapingIsCanonical", OpCancel, &Request{OfferVersion: "<a&b>\u00e9"},
			`{"offerVersion":"<a&b>é","operation":"CANCEL"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			c, err := CanonicalRequest(tt.op, tt.r)
			if err != nil || string(c) != tt.want {
				t.Errorf("CanonicalRequest = %s, %v\nwant %s", c, err, tt.want)
			}
			h, err := RequestHash(tt.op, tt.r)
			if err != nil || h != sha256Hex([]byte(tt.want)) {
				t.Errorf("RequestHash = %s, %v", h, err)
			}
		})
	}
}

func TestRequestHashErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		op        Operation
		r         *Request
		want      Reason
		wantField string
	}{
		{"YenFraction", OpBook, &Request{Amount: &Amount{Value: "1000.5", Currency: "JPY"}}, ReasonInvalidField, "request.amount.value"},
		{"LowerCaseCurrency", OpBook, &Request{Amount: &Amount{Value: "1", Currency: "eur"}}, ReasonInvalidField, "request.amount.currency"},
		{"Negative", OpBook, &Request{Amount: &Amount{Value: "-0.01", Currency: "EUR"}}, ReasonInvalidField, "request.amount.value"},
		{"NilRequest", OpBook, nil, ReasonMissingField, "request"},
		{"BadOperation", Operation("book"), sc01Request(), ReasonInvalidField, "operation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			h, err := RequestHash(tt.op, tt.r)
			checkVerdict(t, err, tt.want, tt.wantField)
			if h != "" {
				t.Errorf("hash = %q on error", h)
			}
		})
	}

	if h, err := (Attempt{Operation: OpBook}).Hash(); h != "" || err != nil {
		t.Errorf("Hash() without request = %q, %v; want \"\", nil", h, err)
	}
}

func TestMinorUnits(t *testing.T) {
	t.Parallel()

	tests := []struct {
		value, currency string
		want            int64
		wantField       string // "" when it converts
	}{
		{"249.9", "EUR", 24990, ""},
		{"249.90", "EUR", 24990, ""},
		{"249.900", "EUR", 24990, ""},
		{"249.9000000000000000000000000000000", "EUR", 24990, ""},
		{"24990", "TRY", 2499000, ""},
		{"1.234", "KWD", 1234, ""},
		{"1.2340", "BHD", 1234, ""},
		{"1000", "JPY", 1000, ""},
		{"1000.0", "JPY", 1000, ""},
		{"1000.5", "JPY", 0, "amount.value"},
		{"0", "EUR", 0, ""},
		{"0.000", "EUR", 0, ""},
		{"-0", "EUR", 0, ""},
		{"0e99", "EUR", 0, ""},
		{"1.5e2", "USD", 15000, ""},
		{"1E-2", "USD", 1, ""},
		{"1e-3", "USD", 0, "amount.value"},
		{"0.01", "CLF", 100, ""},
		{"90071992547409.91", "EUR", MaxMinorUnits, ""},
		{"90071992547409.92", "EUR", 0, "amount.value"},
		{"9007199254740991", "JPY", MaxMinorUnits, ""},
		{"1e16", "JPY", 0, "amount.value"},
		{"1e400", "EUR", 0, "amount.value"},
		{"1e99999", "EUR", 0, "amount.value"},
		{"1e-99999", "EUR", 0, "amount.value"},
		{"-1", "EUR", 0, "amount.value"},
		{"", "EUR", 0, "amount.value"},
		{" 1", "EUR", 0, "amount.value"},
		{"01", "EUR", 0, "amount.value"},
		{"1.", "EUR", 0, "amount.value"},
		{".5", "EUR", 0, "amount.value"},
		{"+1", "EUR", 0, "amount.value"},
		{"1,5", "EUR", 0, "amount.value"},
		{"NaN", "EUR", 0, "amount.value"},
		{"Infinity", "EUR", 0, "amount.value"},
		{"0x10", "EUR", 0, "amount.value"},
		{"1_000", "EUR", 0, "amount.value"},
		{"\u22121", "EUR", 0, "amount.value"},
		{"1", "eur", 0, "amount.currency"},
		{"1", "EURO", 0, "amount.currency"},
		{"1", "XXX", 0, "amount.currency"},
		{"1", "", 0, "amount.currency"},
	}
	for _, tt := range tests {
		t.Run(tt.value+"_"+tt.currency, func(t *testing.T) {
			t.Parallel()

			got, err := MinorUnits(tt.value, tt.currency)
			if tt.wantField != "" {
				checkVerdict(t, err, ReasonInvalidField, tt.wantField)
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("MinorUnits = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestCurrencyExponent(t *testing.T) {
	t.Parallel()

	tests := []struct {
		code string
		want int
		ok   bool
	}{
		{"EUR", 2, true}, {"USD", 2, true}, {"GBP", 2, true}, {"TRY", 2, true}, {"CHF", 2, true},
		{"JPY", 0, true}, {"ISK", 0, true}, {"KRW", 0, true}, {"CLP", 0, true}, {"VND", 0, true},
		{"KWD", 3, true}, {"BHD", 3, true}, {"JOD", 3, true}, {"OMR", 3, true}, {"TND", 3, true},
		{"LYD", 3, true}, {"IQD", 3, true}, {"CLF", 4, true}, {"UYW", 4, true},
		{"eur", 0, false}, {"XAU", 0, false}, {"XXX", 0, false}, {"", 0, false},
	}
	for _, tt := range tests {
		if got, ok := CurrencyExponent(tt.code); got != tt.want || ok != tt.ok {
			t.Errorf("CurrencyExponent(%q) = %d, %v; want %d, %v", tt.code, got, ok, tt.want, tt.ok)
		}
	}
	for code, e := range currencyExponents {
		if len(code) != 3 || strings.ToUpper(code) != code || e < 0 || e > 4 {
			t.Errorf("table entry %q: %d", code, e)
		}
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()

	// Checked once with sha256sum of the canonical documents in Fingerprint's comment.
	const (
		sc01Fingerprint = "26ae62a0939dd989e09f96ecb9d2cc7631f820277428d52ccdfb7eeb559a6cb6"
		sc06Fingerprint = "347d3f56e8b9e1481adb48c871c9d0afa6d993f14d7ff15753b5dd3a37d59761"
	)
	sc06 := func() *Request {
		return &Request{OfferVersion: "off_2:1", TravellerRef: "tr_0007",
			Amount:   &Amount{Value: "420.00", Currency: "EUR"},
			Segments: []Segment{{From: "IST", To: "LHR", Date: "2027-01-14", Flight: "XQ101"}}}
	}
	lower := sc06()
	lower.Segments[0] = Segment{From: "ist", To: "lhr", Date: "2027-01-14", Flight: "xq101"}
	otherAmount := sc01Request()
	otherAmount.Amount.Value, otherAmount.OfferVersion = "999", "off_9:9"
	otherTraveller := sc01Request()
	otherTraveller.TravellerRef = "tr_0002"
	twoLegs := sc06()
	twoLegs.Segments = append(twoLegs.Segments, Segment{From: "LHR", To: "IST", Date: "2027-01-20", Flight: "XQ102"})
	swapped := sc06()
	swapped.Segments = []Segment{twoLegs.Segments[1], twoLegs.Segments[0]}

	tests := []struct {
		name string
		op   Operation
		r    *Request
		want string
	}{
		{"Stay", OpBook, sc01Request(), sc01Fingerprint},
		{"StayOnModify", OpModify, sc01Request(), sc01Fingerprint},
		{"AmountAndOfferIgnored", OpBook, otherAmount, sc01Fingerprint},
		{"Segments", OpBook, sc06(), sc06Fingerprint},
		{"SegmentsUpperCased", OpBook, lower, sc06Fingerprint},
		{"NoneForPayment", OpPaymentCapture, sc01Request(), ""},
		{"NoneForCancel", OpCancel, sc06(), ""},
		{"NoneForNil", OpBook, nil, ""},
		{"NoneWithoutStayOrSegments", OpBook, &Request{TravellerRef: "tr_0001"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			if got := Fingerprint(tt.op, tt.r); got != tt.want {
				t.Errorf("Fingerprint = %q, want %q", got, tt.want)
			}
		})
	}

	distinct := map[string]bool{}
	for _, r := range []*Request{sc01Request(), otherTraveller, sc06(), twoLegs, swapped} {
		distinct[Fingerprint(OpBook, r)] = true
	}
	if len(distinct) != 5 {
		t.Errorf("traveller, stay vs segments, leg count or leg order collide: %d distinct of 5", len(distinct))
	}
}

func TestCanonicalHash(t *testing.T) {
	t.Parallel()

	base, err := CanonicalHash([]byte(hotelStarted))
	if err != nil {
		t.Fatal(err)
	}
	reordered := string(mutate(t, hotelStarted, set("specVersion", json.Number("1")))) // json.Marshal sorts keys
	spaced := strings.ReplaceAll(hotelStarted, ",", " ,\n ")
	number := strings.Replace(hotelStarted, `"value":"249.90"`, `"value":"249.9"`, 1)
	for name, raw := range map[string]string{"Reordered": reordered, "Whitespace": spaced} {
		if h, err := CanonicalHash([]byte(raw)); err != nil || h != base {
			t.Errorf("%s: CanonicalHash = %s, %v; want %s", name, h, err, base)
		}
	}
	if h, _ := CanonicalHash([]byte(number)); h == base {
		t.Error("a changed string value kept the canonical hash")
	}
	a, _ := CanonicalHash([]byte(`{"v":249.90}`))
	b, _ := CanonicalHash([]byte(`{"v":249.9}`))
	if a != b || a == "" {
		t.Errorf("numbers 249.90 and 249.9 hash %q and %q, want equal", a, b)
	}
	for _, bad := range []string{"", "{", `{"a":1,"a":1}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}"} {
		if h, err := CanonicalHash([]byte(bad)); err == nil || h != "" {
			t.Errorf("CanonicalHash(%q) = %q, %v; want an error", bad, h, err)
		}
	}
}

func TestEnums(t *testing.T) {
	t.Parallel()

	if got := AttemptEventTypes(); !slices.Equal(got, []EventType{"attempt.started", "attempt.succeeded", "attempt.failed", "attempt.outcome_unknown"}) {
		t.Errorf("AttemptEventTypes = %v", got)
	}
	if got := EventTypes(); len(got) != 8 || len(uniq(got)) != 8 {
		t.Errorf("EventTypes = %v", got)
	}
	if got := Reasons(); len(got) != 9 || len(uniq(got)) != 9 || got[0] != ReasonTooLarge || got[8] != ReasonStaleEvent {
		t.Errorf("Reasons = %v", got)
	}
	if got := DefaultTransportTimeoutCodes(); !slices.Equal(got, []string{"CONNECT_TIMEOUT", "READ_TIMEOUT", "CONNECTION_RESET", "CLIENT_TIMEOUT", "GATEWAY_TIMEOUT", "TIMEOUT"}) {
		t.Errorf("DefaultTransportTimeoutCodes = %v", got)
	}

	ops := []struct {
		op                             Operation
		prefix                         string
		subjectIsIntent, fingerprinted bool
	}{
		{OpBook, "book", true, true},
		{OpPaymentAuthorize, "authorize", true, false},
		{OpPaymentCapture, "capture", true, false},
		{OpModify, "modify", false, true},
		{OpCancel, "cancel", false, false},
		{OpRefund, "refund", false, false},
	}
	if !slices.Equal(Operations(), OpBook.All()) || len(Operations()) != len(ops) {
		t.Errorf("Operations = %v, All = %v", Operations(), OpBook.All())
	}
	for i, tt := range ops {
		if Operations()[i] != tt.op || !tt.op.Valid() || tt.op.KeyPrefix() != tt.prefix ||
			tt.op.SubjectIsIntent() != tt.subjectIsIntent || tt.op.HasFingerprint() != tt.fingerprinted {
			t.Errorf("%s: unexpected properties", tt.op)
		}
		if op, ok := OperationForKeyPrefix(tt.prefix); !ok || op != tt.op {
			t.Errorf("OperationForKeyPrefix(%q) = %s, %v", tt.prefix, op, ok)
		}
	}
	for _, bad := range []Operation{"", "book", "TRANSFER"} {
		if bad.Valid() || bad.KeyPrefix() != "" {
			t.Errorf("%q counts as an operation", bad)
		}
	}

	classes := []struct {
		c                TimeoutClass
		known            bool
		label, effective TimeoutClass
	}{
		{TimeoutConnect, true, TimeoutConnect, TimeoutConnect},
		{TimeoutRead, true, TimeoutRead, TimeoutRead},
		{TimeoutConnectionReset, true, TimeoutConnectionReset, TimeoutConnectionReset},
		{TimeoutClient, true, TimeoutClient, TimeoutClient},
		{TimeoutBusiness, true, TimeoutBusiness, TimeoutBusiness},
		{TimeoutStale, true, TimeoutStale, TimeoutStale},
		{TimeoutOther, false, TimeoutOther, TimeoutRead},
		{"gateway_gave_up", false, TimeoutOther, TimeoutRead},
		{"READ_TIMEOUT", false, TimeoutOther, TimeoutRead},
	}
	if got := TimeoutClasses(); len(got) != 7 || got[5] != TimeoutStale || got[6] != TimeoutOther {
		t.Errorf("TimeoutClasses = %v", got)
	}
	for _, tt := range classes {
		if tt.c.Known() != tt.known || tt.c.MetricLabel() != tt.label || tt.c.Effective() != tt.effective {
			t.Errorf("%q: Known %v, MetricLabel %q, Effective %q", tt.c, tt.c.Known(), tt.c.MetricLabel(), tt.c.Effective())
		}
	}
}

func uniq[T comparable](s []T) map[T]bool {
	m := map[T]bool{}
	for _, v := range s {
		m[v] = true
	}
	return m
}
