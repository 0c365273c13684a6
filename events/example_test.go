package events_test

import (
	"fmt"

	"github.com/bookrecon/bookrecon/events"
)

func ExampleDecodeAttempt() {
	raw := []byte(`{"specVersion":1,"eventId":"evt_0001","eventType":"attempt.started",
		"occurredAt":"2026-11-30T09:00:00.000Z","tenantId":"t_globetrek","bookingIntentId":"bi_sc01",
		"operation":"BOOK","operationVersion":1,"idempotencyKey":"book:bi_sc01:v1","provider":"sim-hotels",
		"request":{"offerVersion":"off_1:1","travellerRef":"tr_0001",
			"stay":{"propertyId":"h_1042","checkIn":"2027-02-03","checkOut":"2027-02-06"},
			"amount":{"value":"249.90","currency":"EUR"}},
		"recovery":{"clientReference":"cr_sc01"}}`)
	known := func(name string) bool { return name == "sim-hotels" }

	a, err := events.DecodeAttempt(raw, events.DecodeOptions{KnownProvider: known})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(a.EventType, a.Operation, a.KeySubject, a.Request.Amount.Value, a.Request.Amount.Currency)

	// A bad record yields the dead-letter reason and a detail that names the field, never its value.
	_, err = events.DecodeAttempt([]byte(`{"specVersion":1,"eventType":"attempt.exploded"}`), events.DecodeOptions{})
	if ie, ok := events.AsInvalid(err); ok {
		fmt.Println(ie.Reason, "|", ie.Detail)
	}
	// Output:
	// attempt.started BOOK bi_sc01 249.90 EUR
	// unknown_event_type | eventType: not an event type of this topic
}

func ExampleRequestHash() {
	r := &events.Request{
		OfferVersion: "off_1:1",
		TravellerRef: "tr_0001",
		Amount:       &events.Amount{Value: "249.90", Currency: "EUR"},
		Stay:         &events.Stay{PropertyID: "h_1042", CheckIn: "2027-02-03", CheckOut: "2027-02-06"},
	}
	h, _ := events.RequestHash(events.OpBook, r)
	fmt.Println(h)

	r.Amount.Value = "249.9" // equal amounts hash alike
	same, _ := events.RequestHash(events.OpBook, r)
	fmt.Println(same == h)

	_, err := events.RequestHash(events.OpBook, &events.Request{Amount: &events.Amount{Value: "1000.5", Currency: "JPY"}})
	fmt.Println(err)
	// Output:
	// eab2b0fe2377394b2f734ae10f87ccbbadc7d705d56be55a91b2c2939abf89b5
	// true
	// events: invalid_field: request.amount.value: has more decimal places than the currency allows
}

func ExampleMinorUnits() {
	for _, a := range []struct{ value, currency string }{{"24990", "TRY"}, {"1.234", "KWD"}, {"1000", "JPY"}} {
		n, _ := events.MinorUnits(a.value, a.currency)
		fmt.Println(a.value, a.currency, "=", n)
	}
	// Output:
	// 24990 TRY = 2499000
	// 1.234 KWD = 1234
	// 1000 JPY = 1000
}
