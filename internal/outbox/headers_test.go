package outbox_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/outbox"
)

// TestHeadersRoundTrip: DecodeHeaders gives back exactly the headers EncodeHeaders was given,
// in order, for the headers of a resolution, an escalation and a dead letter and for headers no
// code names; a resolution's CloudEvents headers take 69 bytes (the keys and constant values one
// byte each, ce_id and ce_partitionkey taken from the row); malformed input is ErrHeaders.
func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 15, 46, 46, 123456789, time.UTC)
	id := "5f0c1c7e-3d0a-5b7e-9c51-0d6f3d1c2a10"
	long := strings.Repeat("é", 200)
	for _, c := range []struct {
		name    string
		headers []outbox.Header
		eventID string
		key     []byte
		size    int // encoded bytes; 0: not asserted
	}{
		{"resolution", outbox.CloudEvent(id, "/bookrecon", "attempt.resolved", "tenant-a/book:bi_1:v1", "bi_1", at), id, []byte("bi_1"), 69},
		{"escalation", outbox.CloudEvent(id, "/bookrecon", "escalation.opened", "tenant-a/book:bi_2:v1", "bi_2", at), id, []byte("bi_2"), 69},
		{"custom source", outbox.CloudEvent(id, "/elsewhere", "attempt.resolved", "t/k", "bi_3", at), id, []byte("bi_3"), 8 + 1 + 1 + 12 + 1 + 32 + 5 + 1 + 1},
		{"dead letter", []outbox.Header{
			{Key: "bookrecon.dlq.reason", Value: "invalid_json"}, {Key: "bookrecon.dlq.detail", Value: "syntax error at byte 3"},
			{Key: "bookrecon.source.topic", Value: "booking.attempts.v1"}, {Key: "bookrecon.source.partition", Value: "3"},
			{Key: "bookrecon.source.offset", Value: "1234"},
		}, "booking.attempts.v1/3/1234", []byte{0xff, 0x00, 'k'}, 5 + 14 + 24 + 21 + 3 + 6},
		{"none", nil, "e", nil, 0},
		{"literal keys, long and empty values, a nil key", []outbox.Header{{Key: "x-long", Value: long}, {Key: "", Value: ""}, {Key: "ce_id", Value: "e"}}, "e", nil,
			1 + 1 + 6 + 1 + 2 + 400 + 1 + 1 + 1 + 1 + 1 + 1},
		{"a value equal to the key", []outbox.Header{{Key: "k", Value: "bi_9"}, {Key: "content-type", Value: "text/plain"}}, "e", []byte("bi_9"), 1 + 1 + 1 + 1 + 1 + 1 + 1 + 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := outbox.EncodeHeaders(c.headers, c.eventID, c.key)
			got, err := outbox.DecodeHeaders(b, c.eventID, c.key)
			if err != nil {
				t.Fatalf("DecodeHeaders = %v", err)
			}
			if !slices.Equal(got, c.headers) {
				t.Errorf("DecodeHeaders = %q, want %q", got, c.headers)
			}
			if c.size != 0 && len(b) != c.size {
				t.Errorf("encoded %d bytes, want %d: %x", len(b), c.size, b)
			}
		})
	}
	for _, b := range [][]byte{{0x02}, {0x00, 0x05, 'a'}, {0x00, 0x80}, {0xee, 0x01}, {0x02, 0xee}} {
		if _, err := outbox.DecodeHeaders(b, "e", nil); !errors.Is(err, outbox.ErrHeaders) {
			t.Errorf("DecodeHeaders(%x) = %v, want ErrHeaders", b, err)
		}
	}
}
