package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
)

var (
	opsNow = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	opsID  = uuid.MustParse("01938a4e-5c00-7000-8000-0000000000aa")
)

// validDecide is a complete CONFIRMED decision; cases edit a copy.
func validDecide() decideCmd {
	return decideCmd{Tenant: "t_globetrek", Intent: "bi_sc20", Key: "book:bi_sc20:v1", Decision: "CONFIRMED",
		ProviderRef: "LEG-2020", Actor: "ops.agent.07", Reason: "verified with the property by phone", Retryable: true,
		Topic: events.TopicManualDecisions}
}

func TestDecideValidation(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		edit func(c *decideCmd)
		want string
	}{
		{"NothingGiven", func(c *decideCmd) { *c = decideCmd{Retryable: true} },
			"decide: invalid flags:\n  --tenant is required\n  --intent is required\n  --key is required\n  --decision is required\n  --actor is required\n  --reason is required"},
		{"ConfirmedWithoutProviderRef", func(c *decideCmd) { c.ProviderRef = "" },
			"decide: invalid flags:\n  --provider-ref is required with --decision CONFIRMED"},
		{"BlankActorAndReason", func(c *decideCmd) { c.Actor, c.Reason = "  ", "" },
			"decide: invalid flags:\n  --actor is required\n  --reason is required"},
		{"MissingDecision", func(c *decideCmd) { c.Decision = "" },
			"decide: invalid flags:\n  --decision is required"},
		{"LowerCaseDecision", func(c *decideCmd) { c.Decision = "confirmed" },
			"decide: invalid flags:\n  --decision must be CONFIRMED or FAILED"},
		{"InvalidIDs", func(c *decideCmd) { c.Tenant, c.Intent = "t 1", strings.Repeat("i", 65) },
			"decide: invalid flags:\n  --tenant must match [A-Za-z0-9_-]{1,64}\n  --intent must match [A-Za-z0-9_-]{1,64}"},
		{"MalformedKey", func(c *decideCmd) { c.Key = "book:bi_sc20" },
			"decide: invalid flags:\n  --key must be prefix:subject:vN"},
		{"UnknownKeyPrefix", func(c *decideCmd) { c.Key = "upgrade:bi_sc20:v1" },
			"decide: invalid flags:\n  --key prefix must be one of book, authorize, capture, modify, cancel, refund"},
		{"BookKeyOfAnotherIntent", func(c *decideCmd) { c.Key = "book:bi_other:v1" },
			"decide: invalid flags:\n  --key subject must be the --intent for book keys"},
		{"NotRetryableConfirmed", func(c *decideCmd) { c.Retryable = false },
			"decide: invalid flags:\n  --retryable=false applies to --decision FAILED only"},
		{"EscalationIDNotUUID", func(c *decideCmd) { c.EscalationID = "esc_1" },
			"decide: invalid flags:\n  --escalation-id must be an escalation id (a UUID)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validDecide()
			tt.edit(&c)
			var out bytes.Buffer
			err := c.run(context.Background(), decideDeps{}, &out, opsID, opsNow)
			if err == nil || err.Error() != tt.want {
				t.Errorf("err = %v\nwant %s", err, tt.want)
			}
			if out.Len() != 0 {
				t.Errorf("output %q on a validation error", out.String())
			}
		})
	}
}

func TestDecideBuild(t *testing.T) {
	t.Parallel()
	escID := "0196f3a0-0000-5000-8000-000000000001"
	for _, tt := range []struct {
		name string
		edit func(c *decideCmd)
		raw  string
		want events.Decision
	}{
		{
			name: "Confirmed",
			edit: func(*decideCmd) {},
			raw: `{"specVersion":1,"eventId":"01938a4e-5c00-7000-8000-0000000000aa","eventType":"decision.recorded","occurredAt":"2026-11-30T10:00:00.000Z",` +
				`"tenantId":"t_globetrek","bookingIntentId":"bi_sc20","idempotencyKey":"book:bi_sc20:v1","decision":"CONFIRMED","providerReference":"LEG-2020",` +
				`"actor":"ops.agent.07","reason":"verified with the property by phone"}`,
			want: events.Decision{SpecVersion: 1, EventID: opsID.String(), EventType: events.EventDecisionRecorded, OccurredAt: opsNow,
				TenantID: "t_globetrek", BookingIntentID: "bi_sc20", IdempotencyKey: "book:bi_sc20:v1", Decision: "CONFIRMED",
				ProviderReference: "LEG-2020", Actor: "ops.agent.07", Reason: "verified with the property by phone", Retryable: true,
				Operation: events.OpBook, OperationVersion: 1, KeySubject: "bi_sc20"},
		},
		{
			name: "FailedNotRetryableForOneEscalationOfARefund",
			edit: func(c *decideCmd) {
				c.Key, c.Decision, c.ProviderRef, c.Retryable, c.EscalationID = "refund:pay_456:v2", "FAILED", "", false, escID
			},
			raw: `{"specVersion":1,"eventId":"01938a4e-5c00-7000-8000-0000000000aa","eventType":"decision.recorded","occurredAt":"2026-11-30T10:00:00.000Z",` +
				`"tenantId":"t_globetrek","bookingIntentId":"bi_sc20","idempotencyKey":"refund:pay_456:v2","decision":"FAILED",` +
				`"actor":"ops.agent.07","reason":"verified with the property by phone","escalationId":"` + escID + `","retryable":false}`,
			want: events.Decision{SpecVersion: 1, EventID: opsID.String(), EventType: events.EventDecisionRecorded, OccurredAt: opsNow,
				TenantID: "t_globetrek", BookingIntentID: "bi_sc20", IdempotencyKey: "refund:pay_456:v2", Decision: "FAILED",
				Actor: "ops.agent.07", Reason: "verified with the property by phone", EscalationID: escID, Retryable: false,
				Operation: events.OpRefund, OperationVersion: 2, KeySubject: "pay_456"},
		},
		{
			name: "FailedRetryableIsWrittenOut",
			edit: func(c *decideCmd) { c.Decision, c.ProviderRef = "FAILED", "" },
			raw: `{"specVersion":1,"eventId":"01938a4e-5c00-7000-8000-0000000000aa","eventType":"decision.recorded","occurredAt":"2026-11-30T10:00:00.000Z",` +
				`"tenantId":"t_globetrek","bookingIntentId":"bi_sc20","idempotencyKey":"book:bi_sc20:v1","decision":"FAILED",` +
				`"actor":"ops.agent.07","reason":"verified with the property by phone","retryable":true}`,
			want: events.Decision{SpecVersion: 1, EventID: opsID.String(), EventType: events.EventDecisionRecorded, OccurredAt: opsNow,
				TenantID: "t_globetrek", BookingIntentID: "bi_sc20", IdempotencyKey: "book:bi_sc20:v1", Decision: "FAILED",
				Actor: "ops.agent.07", Reason: "verified with the property by phone", Retryable: true,
				Operation: events.OpBook, OperationVersion: 1, KeySubject: "bi_sc20"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validDecide()
			tt.edit(&c)
			raw, d, err := c.build(opsID, opsNow)
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != tt.raw {
				t.Errorf("record =\n%s\nwant\n%s", raw, tt.raw)
			}
			// The record is what the ingester will decode.
			got, err := events.DecodeDecision(raw, events.DecodeOptions{})
			if err != nil {
				t.Fatalf("DecodeDecision: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(got, d); diff != "" {
				t.Errorf("build's decision differs from a fresh decode (-decode +build):\n%s", diff)
			}
			// --dry-run prints exactly the record.
			c.DryRun = true
			var out bytes.Buffer
			if err := c.run(context.Background(), decideDeps{}, &out, opsID, opsNow); err != nil || out.String() != tt.raw+"\n" {
				t.Errorf("dry run = %v %q", err, out.String())
			}
		})
	}
}

// TestOpsCommandLine parses the ops subcommands through the real cli struct.
func TestOpsCommandLine(t *testing.T) {
	t.Parallel()
	parse := func(t *testing.T, args ...string) (*cli, string) {
		t.Helper()
		var c cli
		p, err := kong.New(&c, kong.Name("bookrecon"), kong.Exit(func(int) { t.Fatal("exit") }))
		if err != nil {
			t.Fatal(err)
		}
		kctx, err := p.Parse(args)
		if err != nil {
			t.Fatalf("parse %v: %v", args, err)
		}
		return &c, kctx.Command()
	}
	t.Run("EscalationsList", func(t *testing.T) {
		t.Parallel()
		c, cmd := parse(t, "escalations", "list", "--reason", "blind_retry", "--provider", "sim-air", "--older-than", "90m", "--state", "all", "--json")
		want := escalationsListCmd{Reason: "blind_retry", Provider: "sim-air", OlderThan: 90 * time.Minute, State: "all", Limit: 100, outputFlags: outputFlags{JSON: true}}
		if cmd != "escalations list" || c.Ops.Escalations.List != want {
			t.Errorf("%q %+v", cmd, c.Ops.Escalations.List)
		}
	})
	t.Run("EscalationsListDefaults", func(t *testing.T) {
		t.Parallel()
		c, _ := parse(t, "escalations", "list")
		if want := (escalationsListCmd{State: "open", Limit: 100}); c.Ops.Escalations.List != want {
			t.Errorf("%+v, want %+v", c.Ops.Escalations.List, want)
		}
	})
	t.Run("EscalationsShow", func(t *testing.T) {
		t.Parallel()
		c, cmd := parse(t, "escalations", "show", "0196f3a0-0000-5000-8000-000000000001")
		if cmd != "escalations show <id>" || c.Ops.Escalations.Show.ID != "0196f3a0-0000-5000-8000-000000000001" {
			t.Errorf("%q %+v", cmd, c.Ops.Escalations.Show)
		}
	})
	t.Run("AttemptHistory", func(t *testing.T) {
		t.Parallel()
		c, cmd := parse(t, "attempt", "history", "--tenant", "t_1", "--key", "book:bi_1:v1")
		if cmd != "attempt history" || c.Ops.Attempt.History.Tenant != "t_1" || c.Ops.Attempt.History.Key != "book:bi_1:v1" {
			t.Errorf("%q %+v", cmd, c.Ops.Attempt.History)
		}
	})
	for _, flag := range []string{"--retryable=false", "--no-retryable"} {
		t.Run("Decide"+flag, func(t *testing.T) {
			t.Parallel()
			c, cmd := parse(t, "decide", "--tenant", "t_1", "--intent", "bi_1", "--key", "book:bi_1:v1", "--decision", "FAILED",
				"--actor", "ops.agent.07", "--reason", "provider says no booking", "--escalation-id", "0196f3a0-0000-5000-8000-000000000001", flag)
			want := decideCmd{Tenant: "t_1", Intent: "bi_1", Key: "book:bi_1:v1", Decision: "FAILED", Actor: "ops.agent.07",
				Reason: "provider says no booking", EscalationID: "0196f3a0-0000-5000-8000-000000000001", Retryable: false} // Topic: Run's default, the configured one
			if cmd != "decide" || c.Ops.Decide != want {
				t.Errorf("%q %+v", cmd, c.Ops.Decide)
			}
		})
	}
	t.Run("DecideRetryableByDefault", func(t *testing.T) {
		t.Parallel()
		c, _ := parse(t, "decide", "--tenant", "t_1", "--intent", "bi_1", "--key", "book:bi_1:v1", "--decision", "FAILED",
			"--actor", "ops.agent.07", "--reason", "provider says no booking")
		if !c.Ops.Decide.Retryable {
			t.Error("retryable defaults to false, want true")
		}
	})
}

// TestDecideLooksUpTheAttempt: decide looks the attempt up in its database and says what it
// found there (status and database, never the password) and what the ingester will do. An
// attempt the database does not hold is refused as a usage error, nothing published, unless
// --pending; one of another intent is refused; UNKNOWN is settled by the decision, IN_PROGRESS
// keeps it. Published decisions are read back from a fresh topic on the real broker: keyed by
// bookingIntentId, decodable, with the printed event id.
func TestDecideLooksUpTheAttempt(t *testing.T) {
	t.Parallel()
	pool := seedOpsDB(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO booking_intent (tenant_id, booking_intent_id) VALUES ('t_globetrek', 'bi_sc30');
		INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version, idempotency_key,
			provider, status, first_event_at, window_start)
			VALUES ('01900000-0000-7000-8000-000000000030', 't_globetrek', 'bi_sc30', 'BOOK', 'bi_sc30', 1, 'book:bi_sc30:v1',
			'sim-hotels', 'IN_PROGRESS', now(), now())`); err != nil {
		t.Fatal(err)
	}
	var dbname string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbname); err != nil {
		t.Fatal(err)
	}
	cc := pool.Config().ConnConfig
	db := fmt.Sprintf("database %s on %s:%d", dbname, cc.Host, cc.Port)
	if got := where(pool); got != db || strings.Contains(got, cc.Password) {
		t.Fatalf("where = %q, want %q (no password)", got, db)
	}
	topic := "ops-decide-" + kafkatest.Suffix()
	kafkatest.CreateTopics(t, 1, topic)
	deps := decideDeps{DB: pool, Where: db, Brokers: kafkatest.Brokers()}
	for _, tt := range []struct {
		name string
		edit func(c *decideCmd)
		out  string // with %[1]s the database, %[2]s the topic
		err  string // refused as a usage error (exit 80), nothing published
	}{
		{name: "Absent", edit: func(c *decideCmd) { c.Intent, c.Key = "bi_zz", "book:bi_zz:v1" },
			err: "decide: attempt book:bi_zz:v1 (tenant t_globetrek) is not in %[1]s; nothing published. Check --tenant and --key, " +
				"and that BOOKRECON_DATABASE_URL (--database-url) names the database of the ingester that will apply it; " +
				"to decide on an attempt not recorded yet, add --pending"},
		{name: "Unknown", edit: func(*decideCmd) {},
			out: "found: attempt book:bi_sc20:v1 (tenant t_globetrek) is UNKNOWN in %[1]s\n" +
				"published: " + opsID.String() + " to %[2]s (partition 0, offset 0)\n" +
				"next: the ingester settles the attempt with it: UNKNOWN → CONFIRMED LEG-2020 (source manual), and closes its open anomaly escalations\n"},
		{name: "AbsentPending", edit: func(c *decideCmd) { c.Intent, c.Key, c.Pending = "bi_zz", "book:bi_zz:v1", true },
			out: "not found: attempt book:bi_zz:v1 (tenant t_globetrek) is not in %[1]s (--pending)\n" +
				"published: " + opsID.String() + " to %[2]s (partition 0, offset 1)\n" +
				"next: the ingester keeps the decision until the attempt is recorded and turns UNKNOWN or terminal, then applies it\n"},
		{name: "InProgress", edit: func(c *decideCmd) { c.Intent, c.Key = "bi_sc30", "book:bi_sc30:v1" },
			out: "found: attempt book:bi_sc30:v1 (tenant t_globetrek) is IN_PROGRESS in %[1]s\n" +
				"published: " + opsID.String() + " to %[2]s (partition 0, offset 2)\n" +
				"next: the attempt is IN_PROGRESS: the ingester keeps the decision until the attempt turns UNKNOWN or terminal, then applies it\n"},
		{name: "TerminalEqual", edit: func(c *decideCmd) { c.Intent, c.Key, c.ProviderRef = "bi_sc12", "book:bi_sc12:v2", "HTL-12122" },
			out: "found: attempt book:bi_sc12:v2 (tenant t_globetrek) is CONFIRMED in %[1]s\n" +
				"published: " + opsID.String() + " to %[2]s (partition 0, offset 3)\n" +
				"next: the decision equals the attempt's state: the ingester changes nothing and closes its open anomaly escalations\n"},
	} {
		t.Run(tt.name, func(t *testing.T) { // in order: the offsets follow
			c := validDecide()
			c.Topic = topic
			tt.edit(&c)
			var out bytes.Buffer
			err := c.run(ctx, deps, &out, opsID, opsNow)
			if tt.err != "" {
				var ee exitError
				if want := fmt.Sprintf(tt.err, db); err == nil || err.Error() != want || !errors.As(err, &ee) || ee.code != 80 {
					t.Errorf("err = %v\nwant (exit 80) %s", err, want)
				}
				if out.Len() != 0 {
					t.Errorf("printed %q on a refusal", out.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(fmt.Sprintf(tt.out, db, topic), out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("IntentOfAnotherAttempt", func(t *testing.T) {
		c := validDecide()
		c.Topic, c.Key = topic, "cancel:bk_1:v1"
		if _, err := pool.Exec(ctx, `INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version,
			idempotency_key, provider, status, first_event_at, window_start) VALUES ('01900000-0000-7000-8000-000000000031', 't_globetrek',
			'bi_sc12', 'CANCEL', 'bk_1', 1, 'cancel:bk_1:v1', 'sim-hotels', 'UNKNOWN', now(), now())`); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := c.run(ctx, deps, &out, opsID, opsNow)
		want := "decide: attempt cancel:bk_1:v1 (tenant t_globetrek) in " + db + " belongs to intent bi_sc12, not --intent bi_sc20; " +
			"nothing published (the ingester would reject the decision)"
		var ee exitError
		if err == nil || err.Error() != want || !errors.As(err, &ee) || ee.code != 80 || out.Len() != 0 {
			t.Errorf("err = %v, output %q\nwant (exit 80) %s", err, out.String(), want)
		}
	})
	t.Run("JSON", func(t *testing.T) {
		c := validDecide()
		c.Topic, c.JSON = topic, true
		var out bytes.Buffer
		if err := c.run(ctx, deps, &out, opsID, opsNow); err != nil {
			t.Fatal(err)
		}
		var res struct {
			EventID   string
			Topic     string
			Partition int32
			Offset    int64
			Published bool
			Attempt   decideAttempt
			Next      string
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if res.EventID != opsID.String() || res.Topic != topic || !res.Published || res.Offset != 4 ||
			res.Attempt != (decideAttempt{Database: db, Found: true, Status: "UNKNOWN"}) || !strings.HasPrefix(res.Next, "the ingester settles") {
			t.Errorf("json result %+v", res)
		}
	})

	// Exactly the four published decisions and the JSON run's, in order, none of the refused.
	recs := kafkatest.ReadAll(t, topic, 5, time.Second, 30*time.Second)
	var got []string
	for _, r := range recs {
		d, err := events.DecodeDecision(r.Value, events.DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Key) != d.BookingIntentID || d.EventID != opsID.String() {
			t.Errorf("record keyed %q, decision %+v", r.Key, d)
		}
		got = append(got, d.IdempotencyKey)
	}
	if want := []string{"book:bi_sc20:v1", "book:bi_zz:v1", "book:bi_sc30:v1", "book:bi_sc12:v2", "book:bi_sc20:v1"}; !slices.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
}

// seedOpsDB writes one UNKNOWN attempt at a provider without lookups with its open
// no_lookup_capability escalation, and one CONFIRMED v2 with a closed duplicate_booking and an
// open blind_retry, with their audit trails.
func seedOpsDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, s := range []string{
		`INSERT INTO booking_intent (tenant_id, booking_intent_id) VALUES ('t_globetrek', 'bi_sc20'), ('t_globetrek', 'bi_sc12')`,
		`INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version, idempotency_key,
			provider, status, resolution_source, provider_reference, timeout_class, first_event_at, window_start, created_at,
			unknown_since, terminal_at, check_count, next_check_at)
			VALUES
			('01900000-0000-7000-8000-000000000020', 't_globetrek', 'bi_sc20', 'BOOK', 'bi_sc20', 1, 'book:bi_sc20:v1', 'sim-legacy',
			 'UNKNOWN', NULL, NULL, 'read_timeout', $1, $1, $1, $1::timestamptz + interval '2 seconds', NULL, 0, NULL),
			('01900000-0000-7000-8000-000000000012', 't_globetrek', 'bi_sc12', 'BOOK', 'bi_sc12', 2, 'book:bi_sc12:v2', 'sim-hotels',
			 'CONFIRMED', 'event', 'HTL-12122', NULL, $1, $1, $1::timestamptz + interval '10 seconds', NULL,
			 $1::timestamptz + interval '11 seconds', 0, NULL)`,
		`INSERT INTO escalation (escalation_id, attempt_id, tenant_id, reason, state, opened_at, closed_at, closed_by, actor) VALUES
			('02900000-0000-5000-8000-000000000001', '01900000-0000-7000-8000-000000000020', 't_globetrek', 'no_lookup_capability', 'open',
			 $1::timestamptz + interval '2 seconds', NULL, NULL, NULL),
			('02900000-0000-5000-8000-000000000002', '01900000-0000-7000-8000-000000000012', 't_globetrek', 'blind_retry', 'open',
			 $1::timestamptz + interval '10 seconds', NULL, NULL, NULL),
			('02900000-0000-5000-8000-000000000003', '01900000-0000-7000-8000-000000000012', 't_globetrek', 'duplicate_booking', 'closed',
			 $1::timestamptz + interval '11 seconds', $1::timestamptz + interval '50 minutes', 'manual', 'ops.agent.07')`,
		`INSERT INTO attempt_transition (attempt_id, from_status, to_status, cause, event_id, lookup, actor, reason, note, created_at) VALUES
			('01900000-0000-7000-8000-000000000020', NULL, 'IN_PROGRESS', 'event', 'evt_0060', NULL, NULL, NULL, 'started', $1),
			('01900000-0000-7000-8000-000000000020', 'IN_PROGRESS', 'UNKNOWN', 'event', 'evt_0061', NULL, NULL, NULL,
			 'outcome unknown: read_timeout', $1::timestamptz + interval '2 seconds'),
			('01900000-0000-7000-8000-000000000020', 'UNKNOWN', 'UNKNOWN', 'lookup', NULL, '{"kind": "client_reference", "result": "error"}',
			 NULL, NULL, 'audit only', $1::timestamptz + interval '5 minutes'),
			('01900000-0000-7000-8000-000000000012', NULL, 'IN_PROGRESS', 'event', 'evt_0040', NULL, NULL, NULL, 'started',
			 $1::timestamptz + interval '10 seconds'),
			('01900000-0000-7000-8000-000000000012', 'IN_PROGRESS', 'CONFIRMED', 'event', 'evt_0041', NULL, NULL, NULL, 'attempt.succeeded',
			 $1::timestamptz + interval '11 seconds'),
			('01900000-0000-7000-8000-000000000012', 'CONFIRMED', 'CONFIRMED', 'manual', 'dec_0002', NULL, 'ops.agent.07',
			 'v1 cancelled at the provider', 'decision equals the current state', $1::timestamptz + interval '50 minutes')`,
	} {
		var args []any
		if strings.Contains(s, "$1") {
			args = []any{t0}
		}
		if _, err := pool.Exec(context.Background(), s, args...); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	return pool
}

func TestOpsTables(t *testing.T) {
	t.Parallel()
	pool := seedOpsDB(t)
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		run  func(*bytes.Buffer) error
		want string
	}{
		{
			name: "EscalationsListOpen",
			run: func(w *bytes.Buffer) error {
				return (&escalationsListCmd{State: "open", Limit: 100}).run(ctx, pool, w, opsNow)
			},
			want: `ESCALATION                            TENANT       IDEMPOTENCY KEY  REASON                STATE  AGE     ATTEMPT    PROVIDER
02900000-0000-5000-8000-000000000001  t_globetrek  book:bi_sc20:v1  no_lookup_capability  open   59m58s  UNKNOWN    sim-legacy
02900000-0000-5000-8000-000000000002  t_globetrek  book:bi_sc12:v2  blind_retry           open   59m50s  CONFIRMED  sim-hotels
2 escalations (state open)
`,
		},
		{
			name: "EscalationsListFiltered",
			run: func(w *bytes.Buffer) error {
				return (&escalationsListCmd{State: "all", Provider: "sim-hotels", Reason: "duplicate_booking", OlderThan: time.Minute, Limit: 100}).run(ctx, pool, w, opsNow)
			},
			want: `ESCALATION                            TENANT       IDEMPOTENCY KEY  REASON             STATE   AGE     ATTEMPT    PROVIDER
02900000-0000-5000-8000-000000000003  t_globetrek  book:bi_sc12:v2  duplicate_booking  closed  59m49s  CONFIRMED  sim-hotels
1 escalation (state all)
`,
		},
		{
			name: "EscalationsListLimit",
			run: func(w *bytes.Buffer) error {
				return (&escalationsListCmd{State: "all", Limit: 1}).run(ctx, pool, w, opsNow)
			},
			want: `ESCALATION                            TENANT       IDEMPOTENCY KEY  REASON                STATE  AGE     ATTEMPT  PROVIDER
02900000-0000-5000-8000-000000000001  t_globetrek  book:bi_sc20:v1  no_lookup_capability  open   59m58s  UNKNOWN  sim-legacy
1 escalation (state all; the first 1, raise --limit for more)
`,
		},
		{
			name: "EscalationsListNone",
			run: func(w *bytes.Buffer) error {
				return (&escalationsListCmd{State: "open", OlderThan: 2 * time.Hour, Limit: 100}).run(ctx, pool, w, opsNow)
			},
			want: "ESCALATION  TENANT  IDEMPOTENCY KEY  REASON  STATE  AGE  ATTEMPT  PROVIDER\n0 escalations (state open)\n",
		},
		{
			name: "AttemptHistory",
			run: func(w *bytes.Buffer) error {
				return (&attemptHistoryCmd{Tenant: "t_globetrek", Key: "book:bi_sc20:v1"}).run(ctx, pool, w, opsNow)
			},
			want: `attempt        book:bi_sc20:v1 (tenant t_globetrek, intent bi_sc20)
operation      BOOK v1, subject bi_sc20, provider sim-legacy
status         UNKNOWN
timeout class  read_timeout
recorded       2026-11-30T09:00:00Z
unknown since  2026-11-30T09:00:02Z (59m58s ago)
checks         0 (last lookup -, next -)

History:
#  AT                    FROM         TO           CAUSE   BY                                                   NOTE
1  2026-11-30T09:00:00Z  -            IN_PROGRESS  event   event evt_0060                                       started
2  2026-11-30T09:00:02Z  IN_PROGRESS  UNKNOWN      event   event evt_0061                                       outcome unknown: read_timeout
3  2026-11-30T09:05:00Z  UNKNOWN      UNKNOWN      lookup  lookup {"kind":"client_reference","result":"error"}  audit only
`,
		},
		{
			name: "EscalationsShow",
			run: func(w *bytes.Buffer) error {
				return (&escalationsShowCmd{ID: "02900000-0000-5000-8000-000000000003"}).run(ctx, pool, w, opsNow)
			},
			want: `escalation  02900000-0000-5000-8000-000000000003
reason      duplicate_booking
state       closed
opened      2026-11-30T09:00:11Z (59m49s ago)
closed      2026-11-30T09:50:00Z by manual (ops.agent.07)

attempt       book:bi_sc12:v2 (tenant t_globetrek, intent bi_sc12)
operation     BOOK v2, subject bi_sc12, provider sim-hotels
status        CONFIRMED by event
provider ref  HTL-12122
recorded      2026-11-30T09:00:10Z
terminal at   2026-11-30T09:00:11Z
checks        0 (last lookup -, next -)

Escalations of the attempt:
ESCALATION                            REASON             STATE   OPENED                CLOSED                CLOSED BY
02900000-0000-5000-8000-000000000002  blind_retry        open    2026-11-30T09:00:10Z  -                     -
02900000-0000-5000-8000-000000000003  duplicate_booking  closed  2026-11-30T09:00:11Z  2026-11-30T09:50:00Z  manual (ops.agent.07)

History:
#  AT                    FROM         TO           CAUSE   BY                                                            NOTE
4  2026-11-30T09:00:10Z  -            IN_PROGRESS  event   event evt_0040                                                started
5  2026-11-30T09:00:11Z  IN_PROGRESS  CONFIRMED    event   event evt_0041                                                attempt.succeeded
6  2026-11-30T09:50:00Z  CONFIRMED    CONFIRMED    manual  ops.agent.07: "v1 cancelled at the provider", event dec_0002  decision equals the current state
`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := tt.run(&out); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		for _, c := range []struct {
			err  error
			want string
		}{
			{(&escalationsShowCmd{ID: "nope"}).run(ctx, pool, &out, opsNow), "escalation id: not a UUID"},
			{(&escalationsShowCmd{ID: "02900000-0000-5000-8000-00000000000f"}).run(ctx, pool, &out, opsNow),
				"escalation 02900000-0000-5000-8000-00000000000f: not found"},
			{(&attemptHistoryCmd{Tenant: "t_other", Key: "book:bi_sc20:v1"}).run(ctx, pool, &out, opsNow),
				"attempt book:bi_sc20:v1 in tenant t_other: not found"},
			{(&escalationsListCmd{State: "open", Reason: "late", Limit: 100}).run(ctx, pool, &out, opsNow),
				"query: escalation filter: reason must be one of [deadline_exceeded ambiguous_match no_lookup_capability key_conflict blind_retry duplicate_booking duplicate_provider_reference contradiction]"},
		} {
			if c.err == nil || c.err.Error() != c.want {
				t.Errorf("err = %v, want %s", c.err, c.want)
			}
		}
	})
	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		if err := (&escalationsListCmd{State: "closed", Limit: 100, outputFlags: outputFlags{JSON: true}}).run(ctx, pool, &out, opsNow); err != nil {
			t.Fatal(err)
		}
		want := `[
  {
    "escalationId": "02900000-0000-5000-8000-000000000003",
    "tenantId": "t_globetrek",
    "idempotencyKey": "book:bi_sc12:v2",
    "bookingIntentId": "bi_sc12",
    "reason": "duplicate_booking",
    "state": "closed",
    "openedAt": "2026-11-30T09:00:11Z",
    "closedAt": "2026-11-30T09:50:00Z",
    "closedBy": "manual",
    "actor": "ops.agent.07",
    "attemptId": "01900000-0000-7000-8000-000000000012",
    "attemptStatus": "CONFIRMED",
    "provider": "sim-hotels",
    "ageSeconds": 3589
  }
]
`
		if diff := cmp.Diff(want, out.String()); diff != "" {
			t.Errorf("json (-want +got):\n%s", diff)
		}
		out.Reset()
		if err := (&escalationsListCmd{State: "open", Reason: "contradiction", Limit: 100, outputFlags: outputFlags{JSON: true}}).run(ctx, pool, &out, opsNow); err != nil {
			t.Fatal(err)
		}
		if out.String() != "[]\n" {
			t.Errorf("empty list json = %q, want []", out.String())
		}
	})
}

// TestPublishEpochFrom replays the manual decisions on the attempts' timeline: every occurredAt
// is shifted by now − the first occurredAt of attempts.jsonl, and each record is keyed by its
// bookingIntentId.
func TestPublishEpochFrom(t *testing.T) {
	t.Parallel()
	dir, err := samples.Dir()
	if err != nil {
		t.Fatal(err)
	}
	topic := "ops-publish-" + kafkatest.Suffix()
	kafkatest.CreateTopics(t, 1, topic)
	// attempts.jsonl starts at 2026-11-30T09:00:00Z; now is one hour later.
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	c := publishCmd{File: filepath.Join(dir, "manual-decisions.jsonl"), Topic: topic, EpochFrom: filepath.Join(dir, "attempts.jsonl")}
	var out bytes.Buffer
	if err := c.run(context.Background(), kafkatest.Brokers(), &out, now); err != nil {
		t.Fatal(err)
	}
	if want := "published 2 records to " + topic + " (occurredAt shifted by 1h0m0s)\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
	recs := kafkatest.ReadAll(t, topic, 2, time.Second, 30*time.Second)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for _, r := range recs {
		d, err := events.DecodeDecision(r.Value, events.DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The sample's decision is at 09:01:30, 90 s after the attempts' first record.
		if want := now.Add(90 * time.Second); !d.OccurredAt.Equal(want) || string(r.Key) != "bi_sc20" {
			t.Errorf("decision %s at %s keyed %q, want %s keyed bi_sc20", d.EventID, d.OccurredAt, r.Key, want)
		}
	}
}

// TestOpsHistoryShowsFailures: attempt history shows the failures recorded on the attempt and
// the kept decisions that failed to apply.
func TestOpsHistoryShowsFailures(t *testing.T) {
	t.Parallel()
	pool := seedOpsDB(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, s := range []string{
		`UPDATE booking_attempt SET escalation_failures = 2, escalation_error = 'attempt: escalate: ERROR: too long (SQLSTATE 22001)',
			escalation_retry_at = $1::timestamptz + interval '1 hour', check_failures = 1,
			check_error = 'attempt: audit: ERROR: refused (SQLSTATE 23514)' WHERE idempotency_key = 'book:bi_sc20:v1'`,
		`INSERT INTO pending_decision (tenant_id, idempotency_key, event_id, decision, created_at, failed_at, failure_reason) VALUES
			('t_globetrek', 'book:bi_sc20:v1', 'dec_0009', '{"decision": "CONFIRMED", "providerReference": "LEG-1", "actor": "ops.agent.07"}',
			 $1, $1::timestamptz + interval '2 seconds', 'attempt: audit: ERROR: refused (SQLSTATE 23514)')`,
	} {
		if _, err := pool.Exec(ctx, s, t0); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	var out bytes.Buffer
	if err := (&attemptHistoryCmd{Tenant: "t_globetrek", Key: "book:bi_sc20:v1"}).run(ctx, pool, &out, opsNow); err != nil {
		t.Fatal(err)
	}
	want := `attempt              book:bi_sc20:v1 (tenant t_globetrek, intent bi_sc20)
operation            BOOK v1, subject bi_sc20, provider sim-legacy
status               UNKNOWN
timeout class        read_timeout
recorded             2026-11-30T09:00:00Z
unknown since        2026-11-30T09:00:02Z (59m58s ago)
checks               0 (last lookup -, next -)
check failures       1, last: attempt: audit: ERROR: refused (SQLSTATE 23514)
escalation failures  2 (retry 2026-11-30T10:00:00Z), last: attempt: escalate: ERROR: too long (SQLSTATE 22001)

History:
#  AT                    FROM         TO           CAUSE   BY                                                   NOTE
1  2026-11-30T09:00:00Z  -            IN_PROGRESS  event   event evt_0060                                       started
2  2026-11-30T09:00:02Z  IN_PROGRESS  UNKNOWN      event   event evt_0061                                       outcome unknown: read_timeout
3  2026-11-30T09:05:00Z  UNKNOWN      UNKNOWN      lookup  lookup {"kind":"client_reference","result":"error"}  audit only

Failed decisions (not applied; re-send once the cause is fixed):
EVENT     DECISION         BY            KEPT                  FAILED                REASON
dec_0009  CONFIRMED LEG-1  ops.agent.07  2026-11-30T09:00:00Z  2026-11-30T09:00:02Z  attempt: audit: ERROR: refused (SQLSTATE 23514)
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

// TestOpsCommandsOnUnmigratedDatabase: a command run against a database without the schema
// (never migrated) says what to do — check the URL, migrate — after PostgreSQL's own error, which
// stays in the chain, for decide (refused before it publishes) as for the read commands.
func TestOpsCommandsOnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cc := cfg.ConnConfig
	hint := fmt.Sprintf("; database %s on %s:%d holds no bookrecon schema, or one of another version than this binary's: "+
		"if it is the intended database (BOOKRECON_DATABASE_URL, --database-url), migrate it with this binary's `bookrecon migrate` "+
		"(BOOKRECON_MIGRATE_DATABASE_URL behind a transaction pooler) or start a service, which migrates first", cc.Database, cc.Host, cc.Port)
	g := &Globals{DatabaseURL: url}
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		run  func() error
		pg   string // PostgreSQL's error, before the hint
	}{
		{"decide", func() error {
			c := validDecide()
			c.Pending = true
			return c.Run(ctx, g)
		}, `relation "booking_attempt" does not exist (SQLSTATE 42P01)`},
		{"escalations list", func() error { return (&escalationsListCmd{Limit: 10}).Run(ctx, g) },
			`relation "escalation" does not exist (SQLSTATE 42P01)`},
	} {
		err := tt.run()
		if err == nil || !strings.HasSuffix(err.Error(), tt.pg+hint) {
			t.Errorf("%s: err = %v\nwant it to end with %s%s", tt.name, err, tt.pg, hint)
		}
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
			t.Errorf("%s: PostgreSQL's 42P01 is not in the chain of %v", tt.name, err)
		}
	}
}
