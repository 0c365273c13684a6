package attempt

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/events"
)

// Links are the stored rows a batch's records reach other than through one of their own
// identities (intent, idempotency key, event id, subject, references): what NewBulk loads, locks
// or claims through what is stored, read by ReadLinks so that a batch split into parts applied at
// once (the ingester's lanes, docs/design.md#transactions-and-locks) keeps the records these rows
// link in one part. The maps are empty, never nil, when nothing links.
type Links struct {
	// KeyIntents: (tenant, idempotency key) → the intent of the stored attempt with that key,
	// which booking_attempt_of_intents_or_keys locks FOR UPDATE with the key's records and with
	// every record of that intent (its sibling versions, another intent's key conflict); only
	// where it is another intent than the key's first record's in the batch (the same one links
	// nothing the records do not share already).
	KeyIntents map[[2]string]string
	// KeptRefs: (tenant, key) → the provider references of the manual decisions kept for the key
	// (pending_decision), claimed when its attempt turns UNKNOWN or terminal.
	KeptRefs map[[2]string][]string
	// Holders: provider reference → the (tenant, intent) of each stored attempt holding one of
	// the batch's references (provider_reference_claim) at the provider and operation the batch
	// would claim it at: escalated duplicate_provider_reference with its status by a record that
	// claims it, its escalations closed by a manual decision for it.
	Holders map[string][][2]string
}

// ReadLinks reads, in one statement and without a lock (booking_attempt_links), the Links of a
// batch of attempt events evs and manual decisions decs: the stored attempts of their keys, the
// references of the decisions kept for those keys, and the stored holders of their references
// and of those — each claimed, as Bulk claims it, at the provider and operation of the key's
// stored attempt, else at each provider and operation of the batch's events with that key (the
// claims' primary key): the attempt is created at its key's first event's, and a later event at
// another provider is a key conflict. The statement's rows are (kind, tenant, a, b): 'intent' —
// the stored attempt of key a is of intent b, another than the key's first record's; 'kept' — a
// decision kept for key a brings reference b; 'holder' — reference a, claimed at the provider
// and operation it would be claimed at, is held by an attempt of tenant's intent b. Unlocked on
// purpose: a link another transaction creates after the read is one the parts meet as two
// ingester instances do, settled in commit order (docs/design.md#transactions-and-locks).
func ReadLinks(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, evs []*events.Attempt, decs []*events.Decision) (Links, error) {
	l := Links{KeyIntents: map[[2]string]string{}, KeptRefs: map[[2]string][]string{}, Holders: map[string][][2]string{}}
	n := len(evs) + len(decs)
	keyAt := make(map[[2]string]int, n) // (tenant, key) → its first row
	seen := make(map[[4]string]bool, n) // (tenant, key, provider, operation) of a row
	tenants, keys, provs, ops, intents := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	// key adds a row for each provider and operation the key's events bring: the attempt is
	// created at its first event's, here or in a poll before, and a later event at another is a
	// key conflict that claims nothing, so the key's references are looked up at each. A key only
	// decisions name has one row with no provider.
	key := func(tenant, k, intent, provider, op string) {
		i, ok := keyAt[[2]string{tenant, k}]
		switch {
		case !ok:
			i = len(keys)
			keyAt[[2]string{tenant, k}] = i
			tenants, keys, provs, ops = append(tenants, tenant), append(keys, k), append(provs, provider), append(ops, op)
			intents = append(intents, intent) // the key's first record's: a stored attempt of it links nothing new
		case provider == "" || seen[[4]string{tenant, k, provider, op}]:
		case provs[i] == "":
			provs[i], ops[i] = provider, op
		default:
			tenants, keys, provs, ops = append(tenants, tenant), append(keys, k), append(provs, provider), append(ops, op)
			intents = append(intents, intents[i])
		}
		if provider != "" {
			seen[[4]string{tenant, k, provider, op}] = true
		}
	}
	var refProvs, refOps, refs, decTenants, decKeys, decRefs []string
	for _, ev := range evs {
		key(ev.TenantID, ev.IdempotencyKey, ev.BookingIntentID, ev.Provider, string(ev.Operation))
		if ev.Outcome != nil && ev.Outcome.ProviderReference != "" {
			refProvs, refOps, refs = append(refProvs, ev.Provider), append(refOps, string(ev.Operation)), append(refs, ev.Outcome.ProviderReference)
		}
	}
	for _, d := range decs {
		key(d.TenantID, d.IdempotencyKey, d.BookingIntentID, "", "")
		if d.ProviderReference != "" {
			decTenants, decKeys, decRefs = append(decTenants, d.TenantID), append(decKeys, d.IdempotencyKey), append(decRefs, d.ProviderReference)
		}
	}
	if len(keys) == 0 {
		return l, nil
	}
	rows, err := db.Query(ctx, q("booking_attempt_links"), tenants, keys, provs, ops, refProvs, refOps, refs, decTenants, decKeys, decRefs, intents)
	if err != nil {
		return Links{}, fmt.Errorf("attempt: read links of %d keys: %w", len(keys), err)
	}
	var kind, tenant, a, b string
	if _, err := pgx.ForEachRow(rows, []any{&kind, &tenant, &a, &b}, func() error {
		switch kind {
		case "intent":
			l.KeyIntents[[2]string{tenant, a}] = b
		case "kept":
			l.KeptRefs[[2]string{tenant, a}] = append(l.KeptRefs[[2]string{tenant, a}], b)
		case "holder":
			l.Holders[a] = append(l.Holders[a], [2]string{tenant, b})
		}
		return nil
	}); err != nil {
		return Links{}, fmt.Errorf("attempt: read links of %d keys: %w", len(keys), err)
	}
	return l, nil
}
