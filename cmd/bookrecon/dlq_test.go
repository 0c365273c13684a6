package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/topics"
)

// TestDLQCommands: dead letters produced onto fresh dead-letter topics with the headers the
// ingester writes (internal/ingest deadLetterMessage) are listed exactly, oldest first across
// partitions and topics, filtered by reason and bounded by --limit; show finds one by its source
// position or its own and prints its exact bytes (a hex dump when not printable, the bytes alone
// with --raw); redrive republishes the exact key and value (a null value stays null) to the
// source topic with bookrecon.redrive.from naming the dead letter.
func TestDLQCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sfx := kafkatest.Suffix()
	n := topics.FromSuffix(sfx)
	kafkatest.CreateTopics(t, 2, n.AttemptsDLQ)
	kafkatest.CreateTopics(t, 1, n.DecisionsDLQ, n.Attempts, n.Decisions)
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	prod, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	dead := func(topic string, partition int32, at time.Duration, key, value []byte, reason, detail, source string, sp, so int) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: partition, Timestamp: t0.Add(at), Key: key, Value: value, Headers: []kgo.RecordHeader{
			{Key: "bookrecon.dlq.reason", Value: []byte(reason)},
			{Key: "bookrecon.dlq.detail", Value: []byte(detail)},
			{Key: "bookrecon.source.topic", Value: []byte(source)},
			{Key: "bookrecon.source.partition", Value: []byte(strconv.Itoa(sp))},
			{Key: "bookrecon.source.offset", Value: []byte(strconv.Itoa(so))},
		}}
	}
	binary := []byte{0xff, 0x00, 'b', 'i', 0x01}
	for _, r := range []*kgo.Record{
		dead(n.AttemptsDLQ, 1, time.Second, []byte("bi_1"), []byte(`{"eventId":"e1",`), "invalid_json", "not valid JSON", n.Attempts, 0, 5),
		dead(n.AttemptsDLQ, 0, 2*time.Second, nil, []byte(`{"provider":"sim-x"}`), "unknown_provider", "provider: not in the capability map", n.Attempts, 1, 7),
		dead(n.DecisionsDLQ, 0, 3*time.Second, []byte("bi 2"), binary, "invalid_json", "not UTF-8", n.Decisions, 0, 2),
		dead(n.AttemptsDLQ, 0, 4*time.Second, []byte("bi_3"), nil, "invalid_json", "not a JSON object", n.Attempts, 0, 9),
	} {
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	brokers := kafkatest.Brokers()
	flags := topics.Flags{TopicSuffix: sfx}
	adlq, ddlq, att, dec := n.AttemptsDLQ, n.DecisionsDLQ, n.Attempts, n.Decisions
	pad := func(s string, w int) string { return s + strings.Repeat(" ", w-len(s)) }
	wd := len(ddlq + "/0/0")
	ws := len(dec + "/0/2")

	for _, tt := range []struct {
		name string
		cmd  dlqListCmd
		want string
	}{
		{"All", dlqListCmd{Source: "all", Limit: 100, Flags: flags},
			pad("DEAD LETTER", wd) + "  TIME                  REASON            " + pad("SOURCE", ws) + "  KEY     BYTES  DETAIL\n" +
				pad(adlq+"/1/0", wd) + "  2026-11-30T09:00:01Z  invalid_json      " + pad(att+"/0/5", ws) + "  bi_1    16     not valid JSON\n" +
				pad(adlq+"/0/0", wd) + "  2026-11-30T09:00:02Z  unknown_provider  " + pad(att+"/1/7", ws) + "  (null)  20     provider: not in the capability map\n" +
				pad(ddlq+"/0/0", wd) + "  2026-11-30T09:00:03Z  invalid_json      " + pad(dec+"/0/2", ws) + `  "bi 2"  5      not UTF-8` + "\n" +
				pad(adlq+"/0/1", wd) + "  2026-11-30T09:00:04Z  invalid_json      " + pad(att+"/0/9", ws) + "  bi_3    null   not a JSON object\n" +
				"4 dead letters (" + adlq + ", " + ddlq + ")\n"},
		{"ReasonAndLimit", dlqListCmd{Source: "all", Reason: "invalid_json", Limit: 2, Flags: flags},
			pad("DEAD LETTER", wd) + "  TIME                  REASON        " + pad("SOURCE", ws) + "  KEY     BYTES  DETAIL\n" +
				pad(adlq+"/1/0", wd) + "  2026-11-30T09:00:01Z  invalid_json  " + pad(att+"/0/5", ws) + "  bi_1    16     not valid JSON\n" +
				pad(ddlq+"/0/0", wd) + "  2026-11-30T09:00:03Z  invalid_json  " + pad(dec+"/0/2", ws) + `  "bi 2"  5      not UTF-8` + "\n" +
				"2 dead letters (" + adlq + ", " + ddlq + ", reason invalid_json; the first 2, raise --limit for more)\n"},
		{"Decisions", dlqListCmd{Source: "decisions", Limit: 100, Flags: flags},
			"DEAD LETTER" + strings.Repeat(" ", len(ddlq+"/0/0")-11) + "  TIME                  REASON        SOURCE" + strings.Repeat(" ", len(dec+"/0/2")-6) + "  KEY     BYTES  DETAIL\n" +
				ddlq + "/0/0  2026-11-30T09:00:03Z  invalid_json  " + dec + `/0/2  "bi 2"  5      not UTF-8` + "\n" +
				"1 dead letter (" + ddlq + ")\n"},
	} {
		t.Run("List"+tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := tt.cmd.run(ctx, brokers, &out); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("ListJSON", func(t *testing.T) {
		var out bytes.Buffer
		if err := (&dlqListCmd{Source: "attempts", Reason: "invalid_json", Limit: 100, outputFlags: outputFlags{JSON: true}, Flags: flags}).run(ctx, brokers, &out); err != nil {
			t.Fatal(err)
		}
		var got []deadLetterJSON
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].DeadLetter != adlq+"/1/0" || *got[0].Key != "bi_1" || *got[0].Size != 16 || got[0].Value != nil ||
			got[1].Source != att+"/0/9" || got[1].Size != nil {
			t.Errorf("json %s", out.String())
		}
	})

	for _, tt := range []struct {
		name string
		cmd  dlqShowCmd
		want string
	}{
		{"BySourceWithBytes", dlqShowCmd{Position: att + "/0/5", Bytes: true, Flags: flags},
			"dead letter  " + adlq + "/1/0\ntime         2026-11-30T09:00:01Z\nreason       invalid_json\ndetail       not valid JSON\n" +
				"source       " + att + "/0/5\nkey          bi_1\nbytes        16\n\nvalue (16 bytes, as published):\n" + `{"eventId":"e1",` + "\n"},
		{"ByPositionNotPrintable", dlqShowCmd{Position: ddlq + "/0/0", Bytes: true, Flags: flags},
			"dead letter  " + ddlq + "/0/0\ntime         2026-11-30T09:00:03Z\nreason       invalid_json\ndetail       not UTF-8\n" +
				"source       " + dec + "/0/2\nkey          \"bi 2\"\nbytes        5\n\nvalue (5 bytes, not printable: hex dump):\n" +
				"00000000  ff 00 62 69 01                                    |..bi.|\n"},
		{"NullValue", dlqShowCmd{Position: att + "/0/9", Bytes: true, Flags: flags},
			"dead letter  " + adlq + "/0/1\ntime         2026-11-30T09:00:04Z\nreason       invalid_json\ndetail       not a JSON object\n" +
				"source       " + att + "/0/9\nkey          bi_3\nbytes        null\n\nvalue: null\n"},
		{"Raw", dlqShowCmd{Position: ddlq + "/0/0", Raw: true, Flags: flags}, string(binary)},
	} {
		t.Run("Show"+tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := tt.cmd.run(ctx, brokers, &out); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("ShowNotFound", func(t *testing.T) {
		for pos, want := range map[string]string{
			att + "/0/6":  "dlq: no dead letter of " + att + "/0/6 (bookrecon dlq list shows them)",
			adlq + "/0/7": "dlq: no dead letter at " + adlq + "/0/7 (bookrecon dlq list shows them)",
		} {
			var out bytes.Buffer
			if err := (&dlqShowCmd{Position: pos, Flags: flags}).run(ctx, brokers, &out); err == nil || err.Error() != want {
				t.Errorf("show %s: %v, want %s", pos, err, want)
			}
		}
	})

	t.Run("Redrive", func(t *testing.T) {
		var out bytes.Buffer
		if err := (&dlqRedriveCmd{Position: adlq + "/1/0", Flags: flags}).run(ctx, brokers, &out); err != nil {
			t.Fatal(err)
		}
		want := "republished dead letter " + adlq + "/1/0 (invalid_json, from " + att + "/0/5; key bi_1, 16 bytes) to " + att + "/0/0 with bookrecon.redrive.from=" + adlq + "/1/0\n" +
			"next: the ingester reads it again; an eventId it applied already changes nothing, a record still invalid is dead-lettered again as " + att + "/0/0\n"
		if diff := cmp.Diff(want, out.String()); diff != "" {
			t.Errorf("output (-want +got):\n%s", diff)
		}
		out.Reset()
		if err := (&dlqRedriveCmd{Position: att + "/0/9", Flags: flags}).run(ctx, brokers, &out); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if err := (&dlqRedriveCmd{Position: ddlq + "/0/0", DryRun: true, Flags: flags}).run(ctx, brokers, &out); err != nil ||
			out.String() != "would republish dead letter "+ddlq+"/0/0 (invalid_json, from "+dec+"/0/2; key \"bi 2\", 5 bytes) to "+dec+
				" with bookrecon.redrive.from="+ddlq+"/0/0 (--dry-run: nothing published)\n" {
			t.Errorf("dry run: %v %q", err, out.String())
		}
		recs := kafkatest.ReadAll(t, att, 2, time.Second, 30*time.Second)
		if len(recs) != 2 {
			t.Fatalf("%d records on %s, want 2", len(recs), att)
		}
		for i, want := range []struct {
			key, value []byte
			from       string
		}{{[]byte("bi_1"), []byte(`{"eventId":"e1",`), adlq + "/1/0"}, {[]byte("bi_3"), nil, adlq + "/0/1"}} {
			r := recs[i]
			if !bytes.Equal(r.Key, want.key) || !bytes.Equal(r.Value, want.value) || (r.Value == nil) != (want.value == nil) ||
				len(r.Headers) != 1 || r.Headers[0].Key != "bookrecon.redrive.from" || string(r.Headers[0].Value) != want.from {
				t.Errorf("redriven %d: key %q value %q (nil %v) headers %v; want %q %q from %s", i, r.Key, r.Value, r.Value == nil, r.Headers,
					want.key, want.value, want.from)
			}
		}
		if recs := kafkatest.ReadAll(t, dec, 0, time.Second, 2*time.Second); len(recs) != 0 {
			t.Errorf("dry run published %d records", len(recs))
		}
	})

	t.Run("Usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"dlq", "show", "booking.resolutions.v1/0/1"},
			{"dlq", "redrive", "booking.attempts.dlq.v1/x/1"},
			{"dlq", "list", "--reason", "late"},
			{"dlq", "list", "--limit", "0"},
			{"dlq", "list", "--source", "outbox"},
		} {
			var c cli
			p, err := kong.New(&c, kong.Name("bookrecon"), kong.Exit(func(int) {}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Parse(args); err == nil {
				t.Errorf("%v: parsed, want a usage error", args)
			}
		}
	})
}
