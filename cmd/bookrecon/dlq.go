package main

// bookrecon dlq list|show|redrive: the dead letters on the two dead-letter topics, read with
// franz-go straight from the broker (they are not in the database once the relay published
// them). The dead letters the relay could not publish are outbox rows: bookrecon outbox ….

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/topics"
)

// HeaderRedriveFrom is the header a redriven record carries: the position
// (topic/partition/offset) of the dead letter it was republished from. The ingester ignores it;
// it tells people and tools where the record came from.
const HeaderRedriveFrom = "bookrecon.redrive.from"

// dlqCmd is bookrecon dlq ….
type dlqCmd struct {
	List    dlqListCmd    `cmd:"" help:"List dead letters, oldest first: position, time, reason, source position, key, size, detail."`
	Show    dlqShowCmd    `cmd:"" help:"Show one dead letter, by its source position or its own, with its bytes on request."`
	Redrive dlqRedriveCmd `cmd:"" help:"Republish a dead letter's original key and bytes to its source topic (safe: the ingester deduplicates by eventId)."`
}

// Help is the long help of bookrecon dlq --help.
func (dlqCmd) Help() string {
	return `Dead letters are the records the ingester could not apply (invalid, or refused by the database for their own data). Each is on booking.attempts.dlq.v1 or booking.manual-decisions.dlq.v1 (with the topic suffix, if set) with its original key and bytes and the headers bookrecon.dlq.reason, bookrecon.dlq.detail and bookrecon.source.topic/partition/offset. A dead letter is named by its source position (topic/partition/offset, which is also its outbox event_id) or by its own position on the dead-letter topic; dlq list shows both.

Redriving is safe by construction: the ingester deduplicates every record insert-first by its eventId, so a record that was applied already changes nothing, and one still invalid is dead-lettered again. Redrive after fixing a cause outside the record (a provider added to the capability map, a database constraint); a record that is itself wrong is corrected by its producer, with the same eventId.

Dead letters the relay could not publish (set aside: the broker refused them) are still outbox rows, not on a topic: bookrecon outbox list|retry|discard.`
}

// dlqSources maps --source to the dead-letter topics it reads.
func dlqSources(n topics.Names, source string) []string {
	switch source {
	case "attempts":
		return []string{n.AttemptsDLQ}
	case "decisions":
		return []string{n.DecisionsDLQ}
	}
	return []string{n.AttemptsDLQ, n.DecisionsDLQ}
}

// deadLetterReasons are the reasons the ingester writes: the validation reasons and
// ingest.ReasonProcessingFailed.
func deadLetterReasons() []string {
	var out []string
	for _, r := range events.Reasons() {
		out = append(out, string(r))
	}
	return append(out, ingest.ReasonProcessingFailed)
}

// position is a record's topic/partition/offset.
type position struct {
	Topic     string
	Partition int32
	Offset    int64
}

func (p position) String() string { return fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, p.Offset) }

// parsePosition parses topic/partition/offset (a topic name has no '/').
func parsePosition(s string) (position, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" {
		return position{}, fmt.Errorf("%q is not topic/partition/offset", s)
	}
	p, err1 := strconv.ParseInt(parts[1], 10, 32)
	o, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || p < 0 || o < 0 {
		return position{}, fmt.Errorf("%q is not topic/partition/offset (partition and offset are whole numbers)", s)
	}
	return position{parts[0], int32(p), o}, nil
}

// deadLetter is one record of a dead-letter topic.
type deadLetter struct {
	At     position // on the dead-letter topic
	Time   time.Time
	Reason string
	Detail string
	Source position // where the ingester read the record (-1 for a header that does not parse)
	Key    []byte   // nil: a null key
	Value  []byte   // nil: a null value
}

func parseDeadLetter(r *kgo.Record) deadLetter {
	d := deadLetter{At: position{r.Topic, r.Partition, r.Offset}, Time: r.Timestamp.UTC(), Key: r.Key, Value: r.Value,
		Source: position{Partition: -1, Offset: -1}}
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case events.HeaderDLQReason:
			d.Reason = v
		case events.HeaderDLQDetail:
			d.Detail = v
		case events.HeaderSourceTopic:
			d.Source.Topic = v
		case events.HeaderSourcePartition:
			if p, err := strconv.ParseInt(v, 10, 32); err == nil {
				d.Source.Partition = int32(p)
			}
		case events.HeaderSourceOffset:
			if o, err := strconv.ParseInt(v, 10, 64); err == nil {
				d.Source.Offset = o
			}
		}
	}
	return d
}

// deadLetterJSON is the --json form of a dead letter. A key or value that is not UTF-8 is given
// in hex (keyHex, valueHex) instead; size is null for a null value.
type deadLetterJSON struct {
	DeadLetter string    `json:"deadLetter"`
	Time       time.Time `json:"time"`
	Reason     string    `json:"reason"`
	Detail     string    `json:"detail"`
	Source     string    `json:"source"`
	Key        *string   `json:"key"`
	KeyHex     string    `json:"keyHex,omitempty"`
	Size       *int      `json:"size"`
	Value      *string   `json:"value,omitempty"`
	ValueHex   string    `json:"valueHex,omitempty"`
}

func (d deadLetter) json(withValue bool) deadLetterJSON {
	j := deadLetterJSON{DeadLetter: d.At.String(), Time: d.Time, Reason: d.Reason, Detail: d.Detail, Source: d.Source.String()}
	text := func(b []byte) (*string, string) {
		if utf8.Valid(b) {
			s := string(b)
			return &s, ""
		}
		return nil, hex.EncodeToString(b)
	}
	if d.Key != nil {
		j.Key, j.KeyHex = text(d.Key)
	}
	if d.Value != nil {
		n := len(d.Value)
		j.Size = &n
		if withValue {
			j.Value, j.ValueHex = text(d.Value)
		}
	}
	return j
}

// printable reports whether b can be written to a terminal as it is: UTF-8 with no control
// character but newline and tab.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != '\n' && r != '\t' {
			return false
		}
	}
	return true
}

// keyText shows a key in a table: as it is when printable without spaces to break the columns,
// quoted with escapes otherwise, "(null)" for a null key.
func keyText(k []byte) string {
	switch {
	case k == nil:
		return "(null)"
	case printable(k) && !strings.ContainsFunc(string(k), unicode.IsSpace) && len(k) > 0:
		return string(k)
	}
	return strconv.QuoteToASCII(string(k))
}

func sizeText(v []byte) string {
	if v == nil {
		return "null"
	}
	return strconv.Itoa(len(v))
}

// part is a partition range to read: [From, End).
type part struct {
	Topic     string
	Partition int32
	From, End int64
}

// dlqReader reads dead-letter topics on the broker.
type dlqReader struct {
	brokers []string
}

// partitions lists every partition of ts with records, from its log start to its end offset now.
func (d dlqReader) partitions(ctx context.Context, ts ...string) ([]part, error) {
	cl, err := kgo.NewClient(kafka.Options(d.brokers, nil, nil, "ops")...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, ts...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: end offsets of %s: %w", strings.Join(ts, ", "), err)
	}
	starts, err := adm.ListStartOffsets(ctx, ts...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: start offsets of %s: %w", strings.Join(ts, ", "), err)
	}
	var out []part
	ends.Each(func(e kadm.ListedOffset) {
		s, _ := starts.Lookup(e.Topic, e.Partition)
		if s.Offset < e.Offset {
			out = append(out, part{e.Topic, e.Partition, s.Offset, e.Offset})
		}
	})
	slices.SortFunc(out, func(a, b part) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out, nil
}

// scan reads every part from From to End in offset order per partition; visit returns false to
// stop reading the record's partition.
func (d dlqReader) scan(ctx context.Context, parts []part, visit func(deadLetter) bool) error {
	if len(parts) == 0 {
		return nil
	}
	from := map[string]map[int32]kgo.Offset{}
	open := map[position]int64{} // partition (offset unused) → end
	for _, p := range parts {
		if from[p.Topic] == nil {
			from[p.Topic] = map[int32]kgo.Offset{}
		}
		from[p.Topic][p.Partition] = kgo.NewOffset().At(p.From)
		open[position{Topic: p.Topic, Partition: p.Partition}] = p.End
	}
	cl, err := kgo.NewClient(append(kafka.Options(d.brokers, nil, nil, "ops"), kgo.ConsumePartitions(from))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for len(open) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var errs []error
		fs.EachError(func(t string, p int32, err error) { errs = append(errs, fmt.Errorf("dlq: read %s/%d: %w", t, p, err)) })
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := position{Topic: r.Topic, Partition: r.Partition}
			end, ok := open[k]
			if !ok || r.Offset >= end {
				return
			}
			if !visit(parseDeadLetter(r)) || r.Offset+1 >= end {
				delete(open, k)
				cl.PauseFetchPartitions(map[string][]int32{r.Topic: {r.Partition}})
			}
		})
	}
	return nil
}

// find returns the dead letters named by pos: the one at pos on a dead-letter topic of n, or
// every copy of the dead letter whose source is pos on an input topic of n (the relay may publish
// a row twice), in offset order. None: a not-found error that says what to do.
func (d dlqReader) find(ctx context.Context, n topics.Names, pos position) ([]deadLetter, error) {
	notFound := fmt.Errorf("dlq: no dead letter at %s (bookrecon dlq list shows them)", pos)
	var parts []part
	var match func(deadLetter) bool
	switch pos.Topic {
	case n.AttemptsDLQ, n.DecisionsDLQ:
		all, err := d.partitions(ctx, pos.Topic)
		if err != nil {
			return nil, err
		}
		for _, p := range all {
			if p.Partition == pos.Partition && p.From <= pos.Offset && pos.Offset < p.End {
				parts = []part{{p.Topic, p.Partition, pos.Offset, pos.Offset + 1}}
			}
		}
		match = func(dl deadLetter) bool { return dl.At == pos }
	case n.Attempts, n.Decisions:
		notFound = fmt.Errorf("dlq: no dead letter of %s (bookrecon dlq list shows them)", pos)
		dlq := n.AttemptsDLQ
		if pos.Topic == n.Decisions {
			dlq = n.DecisionsDLQ
		}
		var err error
		if parts, err = d.partitions(ctx, dlq); err != nil {
			return nil, err
		}
		match = func(dl deadLetter) bool { return dl.Source == pos }
	default:
		return nil, errNotOurTopic(n, pos.Topic)
	}
	var out []deadLetter
	err := d.scan(ctx, parts, func(dl deadLetter) bool {
		if match(dl) {
			out = append(out, dl)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, notFound
	}
	slices.SortFunc(out, func(a, b deadLetter) int { return cmp.Compare(a.At.Offset, b.At.Offset) })
	return out, nil
}

func errNotOurTopic(n topics.Names, topic string) error {
	return fmt.Errorf("topic %s is neither a dead-letter topic (%s, %s) nor an input topic (%s, %s) of this deployment (--topic-suffix)",
		topic, n.AttemptsDLQ, n.DecisionsDLQ, n.Attempts, n.Decisions)
}

// validatePosition checks a position argument when the command line is parsed (exit 80).
func validatePosition(n topics.Names, s string) error {
	pos, err := parsePosition(s)
	if err != nil {
		return err
	}
	if !slices.Contains([]string{n.AttemptsDLQ, n.DecisionsDLQ, n.Attempts, n.Decisions}, pos.Topic) {
		return errNotOurTopic(n, pos.Topic)
	}
	return nil
}

type dlqListCmd struct {
	Source string `enum:"attempts,decisions,all" default:"all" help:"Dead letters of attempts (booking.attempts.dlq.v1), of decisions (booking.manual-decisions.dlq.v1), or all."`
	Reason string `placeholder:"R" help:"Only this reason: too_large, invalid_json, missing_field, unsupported_spec_version, unknown_event_type, invalid_field, unknown_provider, invalid_idempotency_key, stale_event, processing_failed."`
	Limit  int    `default:"100" help:"At most this many, the oldest first."`
	outputFlags
	topics.Flags
}

// Validate checks the reason and the limit when the command line is parsed (exit 80).
func (c *dlqListCmd) Validate() error {
	var errs []error
	if c.Reason != "" && !slices.Contains(deadLetterReasons(), c.Reason) {
		errs = append(errs, fmt.Errorf("--reason %q: must be one of %s", c.Reason, strings.Join(deadLetterReasons(), ", ")))
	}
	if c.Limit < 1 {
		errs = append(errs, fmt.Errorf("--limit %d: must be at least 1", c.Limit))
	}
	return errors.Join(errs...)
}

func (c *dlqListCmd) Run(ctx context.Context, g *Globals) error {
	return c.run(ctx, g.KafkaBrokers, os.Stdout)
}

func (c *dlqListCmd) run(ctx context.Context, brokers []string, w io.Writer) error {
	ts := dlqSources(c.Flags.Names(), c.Source)
	r := dlqReader{brokers}
	parts, err := r.partitions(ctx, ts...)
	if err != nil {
		return err
	}
	var dls []deadLetter
	kept := map[position]int{}
	more := false
	// The oldest --limit overall are among the oldest --limit of each partition.
	err = r.scan(ctx, parts, func(dl deadLetter) bool {
		if c.Reason != "" && dl.Reason != c.Reason {
			return true
		}
		k := position{Topic: dl.At.Topic, Partition: dl.At.Partition}
		if kept[k] == c.Limit {
			more = true
			return false
		}
		kept[k]++
		dls = append(dls, dl)
		return true
	})
	if err != nil {
		return err
	}
	slices.SortFunc(dls, func(a, b deadLetter) int {
		return cmp.Or(a.Time.Compare(b.Time), strings.Compare(a.At.Topic, b.At.Topic), cmp.Compare(a.At.Partition, b.At.Partition),
			cmp.Compare(a.At.Offset, b.At.Offset))
	})
	if len(dls) > c.Limit {
		dls, more = dls[:c.Limit], true
	}
	if c.JSON {
		out := []deadLetterJSON{}
		for _, dl := range dls {
			out = append(out, dl.json(false))
		}
		return writeJSON(w, out)
	}
	tw := table(w)
	fmt.Fprintln(tw, "DEAD LETTER\tTIME\tREASON\tSOURCE\tKEY\tBYTES\tDETAIL")
	for _, dl := range dls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dl.At, stamp(dl.Time), dash(dl.Reason), dl.Source, keyText(dl.Key),
			sizeText(dl.Value), dash(dl.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	note := ""
	if c.Reason != "" {
		note = ", reason " + c.Reason
	}
	if more {
		note += fmt.Sprintf("; the first %d, raise --limit for more", c.Limit)
	}
	_, err = fmt.Fprintf(w, "%d dead letter%s (%s%s)\n", len(dls), plural(len(dls)), strings.Join(ts, ", "), note)
	return err
}

type dlqShowCmd struct {
	Position string `arg:"" help:"The dead letter's source position (input-topic/partition/offset, its outbox event_id) or its own (dlq-topic/partition/offset), as dlq list shows them."`
	Bytes    bool   `help:"Also print the record's bytes: as they are when printable, as a hex dump otherwise."`
	Raw      bool   `help:"Print only the record's bytes, exactly as published (for a file: > record.json)."`
	outputFlags
	topics.Flags
}

// Validate checks the position when the command line is parsed (exit 80).
func (c *dlqShowCmd) Validate() error { return validatePosition(c.Flags.Names(), c.Position) }

func (c *dlqShowCmd) Run(ctx context.Context, g *Globals) error {
	return c.run(ctx, g.KafkaBrokers, os.Stdout)
}

func (c *dlqShowCmd) run(ctx context.Context, brokers []string, w io.Writer) error {
	pos, err := parsePosition(c.Position)
	if err != nil {
		return err
	}
	dls, err := dlqReader{brokers}.find(ctx, c.Flags.Names(), pos)
	if err != nil {
		return err
	}
	dl := dls[0]
	switch {
	case c.Raw:
		_, err := w.Write(dl.Value)
		return err
	case c.JSON:
		return writeJSON(w, dl.json(c.Bytes))
	}
	tw := table(w)
	fmt.Fprintf(tw, "dead letter\t%s\n", dl.At)
	fmt.Fprintf(tw, "time\t%s\n", stamp(dl.Time))
	fmt.Fprintf(tw, "reason\t%s\n", dash(dl.Reason))
	fmt.Fprintf(tw, "detail\t%s\n", dash(dl.Detail))
	fmt.Fprintf(tw, "source\t%s\n", dl.Source)
	fmt.Fprintf(tw, "key\t%s\n", keyText(dl.Key))
	fmt.Fprintf(tw, "bytes\t%s\n", sizeText(dl.Value))
	if len(dls) > 1 {
		var at []string
		for _, o := range dls[1:] {
			at = append(at, o.At.String())
		}
		fmt.Fprintf(tw, "copies\talso at %s (published again by the relay, identical)\n", strings.Join(at, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !c.Bytes {
		return nil
	}
	switch {
	case dl.Value == nil:
		_, err = fmt.Fprintln(w, "\nvalue: null")
	case printable(dl.Value):
		_, err = fmt.Fprintf(w, "\nvalue (%d bytes, as published):\n%s\n", len(dl.Value), dl.Value)
	default:
		_, err = fmt.Fprintf(w, "\nvalue (%d bytes, not printable: hex dump):\n%s", len(dl.Value), hex.Dump(dl.Value))
	}
	return err
}

type dlqRedriveCmd struct {
	Position string `arg:"" help:"The dead letter's source position (input-topic/partition/offset) or its own (dlq-topic/partition/offset), as dlq list shows them."`
	DryRun   bool   `help:"Say what would be republished; publish nothing."`
	outputFlags
	topics.Flags
}

// Help is the long help of bookrecon dlq redrive --help.
func (dlqRedriveCmd) Help() string {
	return `Republishes the dead letter's original key and bytes (a null key or value stays null) to the topic it came from, with the header ` +
		HeaderRedriveFrom + `=<dead-letter topic/partition/offset>, and says where it went. Safe by construction: the ingester deduplicates by eventId insert-first, so a record applied already changes nothing, and a record still invalid is dead-lettered again (under its new source position). Set-aside outbox rows are not on a topic: bookrecon outbox list|retry|discard.`
}

// Validate checks the position when the command line is parsed (exit 80).
func (c *dlqRedriveCmd) Validate() error { return validatePosition(c.Flags.Names(), c.Position) }

func (c *dlqRedriveCmd) Run(ctx context.Context, g *Globals) error {
	return c.run(ctx, g.KafkaBrokers, os.Stdout)
}

// redriveResult is redrive's --json output.
type redriveResult struct {
	DeadLetter string `json:"deadLetter"`
	Topic      string `json:"topic"`
	Partition  *int32 `json:"partition,omitempty"`
	Offset     *int64 `json:"offset,omitempty"`
	Published  bool   `json:"published"`
}

func (c *dlqRedriveCmd) run(ctx context.Context, brokers []string, w io.Writer) error {
	pos, err := parsePosition(c.Position)
	if err != nil {
		return err
	}
	n := c.Flags.Names()
	dls, err := dlqReader{brokers}.find(ctx, n, pos)
	if err != nil {
		return err
	}
	dl := dls[0]
	want := n.Attempts
	if dl.At.Topic == n.DecisionsDLQ {
		want = n.Decisions
	}
	if dl.Source.Topic != want {
		return fmt.Errorf("dlq: dead letter %s names source topic %q, not %s; nothing published", dl.At, dl.Source.Topic, want)
	}
	res := redriveResult{DeadLetter: dl.At.String(), Topic: want}
	what := fmt.Sprintf("dead letter %s (%s, from %s; key %s, %s bytes)", dl.At, dash(dl.Reason), dl.Source, keyText(dl.Key), sizeText(dl.Value))
	if c.DryRun {
		if c.JSON {
			return writeJSON(w, res)
		}
		_, err := fmt.Fprintf(w, "would republish %s to %s with %s=%s (--dry-run: nothing published)\n", what, want, HeaderRedriveFrom, dl.At)
		return err
	}
	cl, err := kgo.NewClient(kafka.Options(brokers, nil, nil, "ops")...)
	if err != nil {
		return err
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: want, Key: dl.Key, Value: dl.Value,
		Headers: []kgo.RecordHeader{{Key: HeaderRedriveFrom, Value: []byte(dl.At.String())}}}
	r, err := cl.ProduceSync(ctx, rec).First()
	if err != nil {
		return fmt.Errorf("dlq: redrive %s to %s: %w", dl.At, want, err)
	}
	res.Published, res.Partition, res.Offset = true, &r.Partition, &r.Offset
	if c.JSON {
		return writeJSON(w, res)
	}
	_, err = fmt.Fprintf(w, "republished %s to %s/%d/%d with %s=%s\n"+
		"next: the ingester reads it again; an eventId it applied already changes nothing, a record still invalid is dead-lettered again as %s/%d/%d\n",
		what, want, r.Partition, r.Offset, HeaderRedriveFrom, dl.At, want, r.Partition, r.Offset)
	return err
}
