package main

// The operations subcommands: escalations list|show, attempt history, decide. The queries live
// in internal/query; this file parses flags, formats tables and publishes decisions.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/query"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/topics"
)

// opsCmds are embedded in the cli: bookrecon escalations …, attempt …, decide, outbox …, dlq ….
type opsCmds struct {
	Escalations escalationsCmd `cmd:"" help:"List and show escalations (ops)."`
	Attempt     attemptCmd     `cmd:"" help:"Inspect one attempt (ops)."`
	Decide      decideCmd      `cmd:"" help:"Publish an audited manual decision (decision.recorded) to booking.manual-decisions.v1."`
	Outbox      outboxCmd      `cmd:"" help:"List, retry or discard the outbox rows the relay set aside (ops)."`
	DLQ         dlqCmd         `cmd:"" name:"dlq" help:"List, show and redrive the dead letters on the dead-letter topics (ops); set-aside outbox rows: bookrecon outbox."`
}

// outputFlags are shared by the ops commands.
type outputFlags struct {
	JSON bool `name:"json" help:"Machine output: JSON instead of text tables."`
}

type escalationsCmd struct {
	List escalationsListCmd `cmd:"" help:"List escalations, oldest first."`
	Show escalationsShowCmd `cmd:"" help:"Show one escalation, its attempt and the attempt's full history."`
}

type escalationsListCmd struct {
	Reason    string        `placeholder:"R" help:"Only this reason: deadline_exceeded, ambiguous_match, no_lookup_capability, key_conflict, blind_retry, duplicate_booking, duplicate_provider_reference, contradiction."`
	Provider  string        `placeholder:"P" help:"Only attempts at this provider."`
	Tenant    string        `placeholder:"T" help:"Only this tenant."`
	OlderThan time.Duration `placeholder:"DURATION" help:"Only escalations opened at least this long ago (Go duration: 90m, 2h)."`
	State     string        `enum:"open,closed,all" default:"open" help:"open, closed or all (default open)."`
	Limit     int           `default:"100" help:"At most this many rows."`
	outputFlags
}

func (c *escalationsListCmd) filter(now time.Time) query.EscalationFilter {
	return query.EscalationFilter{State: c.State, Reason: c.Reason, Provider: c.Provider, TenantID: c.Tenant,
		OlderThan: c.OlderThan, Now: now, Limit: c.Limit}
}

// Validate checks the filter when the command line is parsed (a usage error: exit 80).
func (c *escalationsListCmd) Validate() error { return c.filter(time.Time{}).Validate() }

func (c *escalationsListCmd) Run(ctx context.Context, g *Globals) error {
	return withPool(ctx, g, func(pool *pgxpool.Pool) error { return c.run(ctx, pool, os.Stdout, time.Now()) })
}

func (c *escalationsListCmd) run(ctx context.Context, db query.DB, w io.Writer, now time.Time) error {
	es, err := query.Escalations(ctx, db, c.filter(now))
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSON(w, es)
	}
	tw := table(w)
	fmt.Fprintln(tw, "ESCALATION\tTENANT\tIDEMPOTENCY KEY\tREASON\tSTATE\tAGE\tATTEMPT\tPROVIDER")
	for _, e := range es {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.EscalationID, e.TenantID, e.IdempotencyKey, e.Reason,
			e.State, age(e.Age), e.AttemptStatus, e.Provider)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	more := ""
	if c.Limit > 0 && len(es) == c.Limit {
		more = fmt.Sprintf("; the first %d, raise --limit for more", c.Limit)
	}
	_, err = fmt.Fprintf(w, "%d escalation%s (state %s%s)\n", len(es), plural(len(es)), c.State, more)
	return err
}

type escalationsShowCmd struct {
	ID string `arg:"" help:"Escalation id (UUID)."`
	outputFlags
}

// Validate refuses an id that is not a UUID when the command line is parsed (a usage error:
// exit 80), before any database is asked.
func (c *escalationsShowCmd) Validate() error {
	if _, err := uuid.Parse(c.ID); err != nil {
		return fmt.Errorf("escalation id %q is not a UUID (bookrecon escalations list shows them)", c.ID)
	}
	return nil
}

func (c *escalationsShowCmd) Run(ctx context.Context, g *Globals) error {
	return withPool(ctx, g, func(pool *pgxpool.Pool) error { return c.run(ctx, pool, os.Stdout, time.Now()) })
}

func (c *escalationsShowCmd) run(ctx context.Context, db query.DB, w io.Writer, now time.Time) error {
	id, err := uuid.Parse(c.ID)
	if err != nil {
		return fmt.Errorf("escalation id: not a UUID")
	}
	d, err := query.EscalationByID(ctx, db, id, now)
	if errors.Is(err, query.ErrNotFound) {
		return fmt.Errorf("escalation %s: not found", id)
	}
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSON(w, d)
	}
	e := d.Escalation
	tw := table(w)
	fmt.Fprintf(tw, "escalation\t%s\n", e.EscalationID)
	fmt.Fprintf(tw, "reason\t%s\n", e.Reason)
	fmt.Fprintf(tw, "state\t%s\n", e.State)
	fmt.Fprintf(tw, "opened\t%s (%s ago)\n", stamp(e.OpenedAt), age(e.Age))
	if e.ClosedAt != nil {
		fmt.Fprintf(tw, "closed\t%s by %s%s\n", stamp(*e.ClosedAt), e.ClosedBy, orEmpty(" (", e.Actor, ")"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := writeAttempt(w, d.Attempt, now); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nEscalations of the attempt:")
	tw = table(w)
	fmt.Fprintln(tw, "ESCALATION\tREASON\tSTATE\tOPENED\tCLOSED\tCLOSED BY")
	for _, o := range d.Escalations {
		closed, by := "-", "-"
		if o.ClosedAt != nil {
			closed, by = stamp(*o.ClosedAt), o.ClosedBy+orEmpty(" (", o.Actor, ")")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.EscalationID, o.Reason, o.State, stamp(o.OpenedAt), closed, by)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nHistory:")
	return writeTransitions(w, d.Transitions)
}

type attemptCmd struct {
	History attemptHistoryCmd `cmd:"" help:"Every state change and recorded fact of an attempt, in order, with its cause."`
}

type attemptHistoryCmd struct {
	Tenant string `required:"" placeholder:"T" help:"Tenant id."`
	Key    string `required:"" placeholder:"K" help:"Idempotency key of the attempt (prefix:subject:vN)."`
	outputFlags
}

// Validate refuses a key that is not prefix:subject:vN when the command line is parsed (a usage
// error: exit 80), before any database is asked.
func (c *attemptHistoryCmd) Validate() error {
	if _, _, _, err := events.ParseKey(c.Key); err != nil {
		inv, _ := events.AsInvalid(err)
		return fmt.Errorf("--key %s", strings.TrimPrefix(inv.Detail, "idempotencyKey: "))
	}
	return nil
}

func (c *attemptHistoryCmd) Run(ctx context.Context, g *Globals) error {
	return withPool(ctx, g, func(pool *pgxpool.Pool) error { return c.run(ctx, pool, os.Stdout, time.Now()) })
}

func (c *attemptHistoryCmd) run(ctx context.Context, db query.DB, w io.Writer, now time.Time) error {
	h, err := query.History(ctx, db, c.Tenant, c.Key)
	if errors.Is(err, query.ErrNotFound) {
		return fmt.Errorf("attempt %s in tenant %s: not found", c.Key, c.Tenant)
	}
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSON(w, h)
	}
	if err := writeAttempt(w, h.Attempt, now); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nHistory:")
	if err := writeTransitions(w, h.Transitions); err != nil {
		return err
	}
	return writeFailedDecisions(w, h.FailedDecisions)
}

func writeAttempt(w io.Writer, a query.Attempt, now time.Time) error {
	tw := table(w)
	fmt.Fprintf(tw, "attempt\t%s (tenant %s, intent %s)\n", a.IdempotencyKey, a.TenantID, a.BookingIntentID)
	fmt.Fprintf(tw, "operation\t%s v%d, subject %s, provider %s\n", a.Operation, a.Version, a.Subject, a.Provider)
	status := string(a.Status)
	if a.ResolutionSource != "" {
		status += " by " + a.ResolutionSource
	}
	fmt.Fprintf(tw, "status\t%s\n", status)
	if a.ProviderReference != "" {
		fmt.Fprintf(tw, "provider ref\t%s\n", a.ProviderReference)
	}
	if a.FailureCode != "" || a.Retryable != nil {
		retry := "-"
		if a.Retryable != nil {
			retry = fmt.Sprint(*a.Retryable)
		}
		fmt.Fprintf(tw, "failure\t%s (retryable %s)\n", dash(a.FailureCode), retry)
	}
	if a.TimeoutClass != "" {
		fmt.Fprintf(tw, "timeout class\t%s\n", a.TimeoutClass)
	}
	fmt.Fprintf(tw, "recorded\t%s\n", stamp(a.CreatedAt))
	if a.UnknownSince != nil {
		fmt.Fprintf(tw, "unknown since\t%s (%s ago)\n", stamp(*a.UnknownSince), age(now.Sub(*a.UnknownSince)))
	}
	if a.TerminalAt != nil {
		fmt.Fprintf(tw, "terminal at\t%s\n", stamp(*a.TerminalAt))
	}
	next := "-"
	if a.NextCheckAt != nil {
		next = stamp(*a.NextCheckAt)
	}
	fmt.Fprintf(tw, "checks\t%d (last lookup %s, next %s)\n", a.CheckCount, dash(a.LastLookupResult), next)
	if a.BlindRetry {
		fmt.Fprintf(tw, "blind retry\tyes\n")
	}
	if a.CheckFailures > 0 {
		fmt.Fprintf(tw, "check failures\t%d, last: %s\n", a.CheckFailures, a.CheckError)
	}
	if a.EscalationFailures > 0 {
		retry := "-"
		if a.EscalationRetryAt != nil {
			retry = stamp(*a.EscalationRetryAt)
		}
		fmt.Fprintf(tw, "escalation failures\t%d (retry %s), last: %s\n", a.EscalationFailures, retry, a.EscalationError)
	}
	return tw.Flush()
}

// writeFailedDecisions lists the kept decisions that failed to apply (none: nothing).
func writeFailedDecisions(w io.Writer, fs []query.FailedDecision) error {
	if len(fs) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nFailed decisions (not applied; re-send once the cause is fixed):")
	tw := table(w)
	fmt.Fprintln(tw, "EVENT\tDECISION\tBY\tKEPT\tFAILED\tREASON")
	for _, f := range fs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.EventID, f.Decision+orEmpty(" ", f.ProviderReference, ""), dash(f.Actor),
			stamp(f.KeptAt), stamp(f.FailedAt), f.FailureReason)
	}
	return tw.Flush()
}

func writeTransitions(w io.Writer, ts []query.Transition) error {
	tw := table(w)
	fmt.Fprintln(tw, "#\tAT\tFROM\tTO\tCAUSE\tBY\tNOTE")
	for _, t := range ts {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, stamp(t.At), dash(string(t.From)), t.To, t.Cause,
			causeDetail(t), dash(t.Note))
	}
	return tw.Flush()
}

// causeDetail says who or what caused a transition: the event id, the lookup as recorded, or the
// actor with the reason (and the decision's event id).
func causeDetail(t query.Transition) string {
	var parts []string
	if t.Actor != "" {
		parts = append(parts, fmt.Sprintf("%s: %q", t.Actor, t.Reason))
	} else if t.Reason != "" {
		parts = append(parts, fmt.Sprintf("%q", t.Reason))
	}
	if t.EventID != "" {
		parts = append(parts, "event "+t.EventID)
	}
	if len(t.Lookup) > 0 {
		var b bytes.Buffer
		if json.Compact(&b, t.Lookup) != nil {
			b.Reset()
			b.Write(t.Lookup)
		}
		parts = append(parts, "lookup "+b.String())
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

type decideCmd struct {
	Tenant       string `placeholder:"T" help:"Tenant id."`
	Intent       string `placeholder:"I" help:"bookingIntentId (the record key)."`
	Key          string `placeholder:"K" help:"Idempotency key of the attempt decided on (prefix:subject:vN)."`
	Decision     string `placeholder:"CONFIRMED|FAILED" help:"The attempt's outcome, as verified by a person."`
	ProviderRef  string `name:"provider-ref" placeholder:"REF" help:"The provider's reference of the booking (required with CONFIRMED)."`
	Actor        string `placeholder:"A" help:"Who decides (an ops account, never a traveller's data)."`
	Reason       string `placeholder:"TEXT" help:"Why: how the outcome was verified."`
	EscalationID string `name:"escalation-id" placeholder:"ID" help:"Close only this escalation (by default the decision closes the attempt's open anomaly escalations)."`
	Retryable    bool   `default:"true" negatable:"" help:"For FAILED: whether the failure allows a safe retry; --retryable=false when the provider may still hold a booking."`
	Pending      bool   `help:"Publish even though the database holds no such attempt (not recorded yet): the ingester keeps the decision until the attempt is recorded and turns UNKNOWN or terminal. Without it decide refuses, so a mistyped key or the wrong database is not decided on."`
	DryRun       bool   `help:"Print the event instead of publishing it (the database is not asked)."`
	Topic        string `hidden:"" help:"Target topic (default the manual decisions topic, with the topic suffix if one is set)."`
	outputFlags
	topics.Flags
}

// decisionRecord is the wire form of decision.recorded (docs/design.md#cause-manual-decision).
// retryable is written for FAILED only.
type decisionRecord struct {
	SpecVersion       int              `json:"specVersion"`
	EventID           string           `json:"eventId"`
	EventType         events.EventType `json:"eventType"`
	OccurredAt        string           `json:"occurredAt"`
	TenantID          string           `json:"tenantId"`
	BookingIntentID   string           `json:"bookingIntentId"`
	IdempotencyKey    string           `json:"idempotencyKey"`
	Decision          string           `json:"decision"`
	ProviderReference string           `json:"providerReference,omitempty"`
	Actor             string           `json:"actor"`
	Reason            string           `json:"reason"`
	EscalationID      string           `json:"escalationId,omitempty"`
	Retryable         *bool            `json:"retryable,omitempty"`
}

// validate reports every flag problem at once, one per line.
func (c *decideCmd) validate() error {
	var errs []string
	need := func(name, v string) bool {
		if strings.TrimSpace(v) == "" {
			errs = append(errs, "--"+name+" is required")
			return false
		}
		return true
	}
	if need("tenant", c.Tenant) && !query.ValidID(c.Tenant) {
		errs = append(errs, "--tenant must match [A-Za-z0-9_-]{1,64}")
	}
	if need("intent", c.Intent) && !query.ValidID(c.Intent) {
		errs = append(errs, "--intent must match [A-Za-z0-9_-]{1,64}")
	}
	if need("key", c.Key) {
		prefix, subject, _, err := events.ParseKey(c.Key)
		op, _ := events.OperationForKeyPrefix(prefix)
		switch {
		case err != nil:
			msg := err.Error()
			if inv, ok := events.AsInvalid(err); ok {
				msg = strings.TrimPrefix(inv.Detail, inv.Field+": ")
			}
			errs = append(errs, "--key "+msg)
		case op.SubjectIsIntent() && query.ValidID(c.Intent) && subject != c.Intent:
			errs = append(errs, "--key subject must be the --intent for "+prefix+" keys")
		}
	}
	if need("decision", c.Decision) && c.Decision != events.DecisionConfirmed && c.Decision != events.DecisionFailed {
		errs = append(errs, "--decision must be CONFIRMED or FAILED")
	}
	if c.Decision == events.DecisionConfirmed {
		if strings.TrimSpace(c.ProviderRef) == "" {
			errs = append(errs, "--provider-ref is required with --decision CONFIRMED")
		}
		if !c.Retryable {
			errs = append(errs, "--retryable=false applies to --decision FAILED only")
		}
	}
	need("actor", c.Actor)
	need("reason", c.Reason)
	if c.EscalationID != "" {
		if _, err := uuid.Parse(c.EscalationID); err != nil {
			errs = append(errs, "--escalation-id must be an escalation id (a UUID)")
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid flags:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

// build validates the flags and returns the decision.recorded record (eventId id, occurredAt
// now) after checking it with events.DecodeDecision, exactly as the ingester will.
func (c *decideCmd) build(id uuid.UUID, now time.Time) ([]byte, events.Decision, error) {
	if err := c.validate(); err != nil {
		return nil, events.Decision{}, fmt.Errorf("decide: %w", err)
	}
	rec := decisionRecord{SpecVersion: events.SpecVersion, EventID: id.String(), EventType: events.EventDecisionRecorded,
		OccurredAt: now.UTC().Format("2006-01-02T15:04:05.000Z07:00"), TenantID: c.Tenant, BookingIntentID: c.Intent,
		IdempotencyKey: c.Key, Decision: c.Decision, ProviderReference: c.ProviderRef, Actor: strings.TrimSpace(c.Actor),
		Reason: strings.TrimSpace(c.Reason), EscalationID: c.EscalationID}
	if c.Decision == events.DecisionFailed {
		rec.Retryable = &c.Retryable
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, events.Decision{}, err
	}
	d, err := events.DecodeDecision(raw, events.DecodeOptions{})
	if err != nil {
		return nil, events.Decision{}, fmt.Errorf("decide: the decision does not validate: %w", err)
	}
	return raw, d, nil
}

// Validate runs validate when the command line is parsed, so invalid flags are a usage error
// (exit 80) like a malformed one.
func (c *decideCmd) Validate() error { return c.validate() } // kong prefixes "decide:"

func (c *decideCmd) Run(ctx context.Context, g *Globals) error {
	c.Topic = cmp.Or(c.Topic, c.Flags.Names().Decisions)
	id, now := uuid.Must(uuid.NewV7()), time.Now()
	if c.DryRun {
		return c.run(ctx, decideDeps{}, os.Stdout, id, now)
	}
	return withPool(ctx, g, func(pool *pgxpool.Pool) error {
		return c.run(ctx, decideDeps{DB: pool, Where: where(pool), Brokers: g.KafkaBrokers}, os.Stdout, id, now)
	})
}

// decideDeps are where decide looks the attempt up and publishes.
type decideDeps struct {
	DB      query.DB
	Where   string // the database, as shown: "database NAME on HOST:PORT" (never the password)
	Brokers []string
}

// where names pool's database for messages: dbname, host and port, never the user or password.
func where(pool *pgxpool.Pool) string {
	cc := pool.Config().ConnConfig
	return fmt.Sprintf("database %s on %s:%d", cc.Database, cc.Host, cc.Port)
}

// decideResult is decide's --json output.
type decideResult struct {
	EventID   string          `json:"eventId"`
	Topic     string          `json:"topic"`
	Partition *int32          `json:"partition,omitempty"`
	Offset    *int64          `json:"offset,omitempty"`
	Published bool            `json:"published"`
	Attempt   *decideAttempt  `json:"attempt,omitempty"`
	Next      string          `json:"next,omitempty"`
	Event     json.RawMessage `json:"event"`
}

// decideAttempt is what decide found in its database.
type decideAttempt struct {
	Database string `json:"database"`
	Found    bool   `json:"found"`
	Status   string `json:"status,omitempty"`
}

func (c *decideCmd) run(ctx context.Context, deps decideDeps, w io.Writer, id uuid.UUID, now time.Time) error {
	raw, d, err := c.build(id, now)
	if err != nil {
		return err
	}
	res := decideResult{EventID: d.EventID, Topic: c.Topic, Event: raw}
	if c.DryRun {
		if c.JSON {
			return writeJSON(w, res)
		}
		_, err := fmt.Fprintf(w, "%s\n", raw)
		return err
	}
	found, next, err := c.lookup(ctx, deps)
	if err != nil {
		return err
	}
	res.Attempt, res.Next = &found, next
	if !c.JSON {
		if found.Found {
			fmt.Fprintf(w, "found: attempt %s (tenant %s) is %s in %s\n", c.Key, c.Tenant, found.Status, found.Database)
		} else {
			fmt.Fprintf(w, "not found: attempt %s (tenant %s) is not in %s (--pending)\n", c.Key, c.Tenant, found.Database)
		}
	}
	cl, err := kgo.NewClient(kafka.Options(deps.Brokers, nil, nil, "ops")...)
	if err != nil {
		return err
	}
	defer cl.Close()
	r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: c.Topic, Key: []byte(d.BookingIntentID), Value: raw}).First()
	if err != nil {
		return fmt.Errorf("decide: publish %s to %s: %w", d.EventID, c.Topic, err)
	}
	res.Published, res.Partition, res.Offset = true, &r.Partition, &r.Offset
	if c.JSON {
		return writeJSON(w, res)
	}
	_, err = fmt.Fprintf(w, "published: %s to %s (partition %d, offset %d)\nnext: %s\n", d.EventID, c.Topic, r.Partition, r.Offset, next)
	return err
}

// lookup finds the attempt in deps.DB and says what the ingester will do with the decision
// there. It refuses, as a usage error and before anything is published, an attempt the database
// does not hold (unless --pending) and one of another intent (the ingester would reject it).
func (c *decideCmd) lookup(ctx context.Context, deps decideDeps) (decideAttempt, string, error) {
	found := decideAttempt{Database: deps.Where}
	h, err := query.History(ctx, deps.DB, c.Tenant, c.Key)
	switch {
	case errors.Is(err, query.ErrNotFound):
		if !c.Pending {
			return found, "", exitError{code: service.ExitUsage, err: fmt.Errorf("decide: attempt %s (tenant %s) is not in %s; nothing published. "+
				"Check --tenant and --key, and that BOOKRECON_DATABASE_URL (--database-url) names the database of the ingester that will apply it; "+
				"to decide on an attempt not recorded yet, add --pending", c.Key, c.Tenant, deps.Where)}
		}
		return found, "the ingester keeps the decision until the attempt is recorded and turns UNKNOWN or terminal, then applies it", nil
	case err != nil:
		return found, "", fmt.Errorf("decide: look up attempt %s (tenant %s) in %s: %w", c.Key, c.Tenant, deps.Where, err)
	}
	a := h.Attempt
	found.Found, found.Status = true, string(a.Status)
	if a.BookingIntentID != c.Intent {
		return found, "", exitError{code: service.ExitUsage, err: fmt.Errorf("decide: attempt %s (tenant %s) in %s belongs to intent %s, not --intent %s; "+
			"nothing published (the ingester would reject the decision)", c.Key, c.Tenant, deps.Where, a.BookingIntentID, c.Intent)}
	}
	only := "its open anomaly escalations"
	if c.EscalationID != "" {
		only = "escalation " + c.EscalationID
	}
	to := c.Decision
	if c.Decision == events.DecisionConfirmed {
		to += " " + c.ProviderRef
	}
	switch {
	case a.Status == attempt.StatusInProgress:
		return found, "the attempt is IN_PROGRESS: the ingester keeps the decision until the attempt turns UNKNOWN or terminal, then applies it", nil
	case a.Status == attempt.StatusUnknown:
		return found, fmt.Sprintf("the ingester settles the attempt with it: UNKNOWN → %s (source manual), and closes %s", to, only), nil
	case string(a.Status) == c.Decision && (c.Decision != events.DecisionConfirmed || c.ProviderRef == a.ProviderReference):
		return found, fmt.Sprintf("the decision equals the attempt's state: the ingester changes nothing and closes %s", only), nil
	}
	return found, fmt.Sprintf("the decision changes a terminal state: %s → %s, audited, a further resolution (source manual) published; it closes %s",
		a.Status, to, only), nil
}

// withPool opens a small pool on the database for one command. When fn fails because a table
// or column is missing (postgres.IsUnmigrated: the wrong database, one never migrated, or one
// migrated by another version), the error goes on to say so and what to do; PostgreSQL's error
// stays in the chain (errors.As).
func withPool(ctx context.Context, g *Globals, fn func(*pgxpool.Pool) error) error {
	pool, err := g.open(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	err = fn(pool)
	if postgres.IsUnmigrated(err) {
		return fmt.Errorf("%w; %s holds no bookrecon schema, or one of another version than this binary's: "+
			"if it is the intended database (BOOKRECON_DATABASE_URL, --database-url), migrate it with this binary's `bookrecon migrate` "+
			"(BOOKRECON_MIGRATE_DATABASE_URL behind a transaction pooler) or start a service, which migrates first", err, where(pool))
	}
	return err
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// stamp formats t in UTC to the second.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// age formats d compactly: 45s, 4m10s, 2h13m, 3d4h.
func age(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orEmpty(before, s, after string) string {
	if s == "" {
		return ""
	}
	return before + s + after
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
