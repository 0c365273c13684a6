package ingest

import (
	"cmp"
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A lane is a part of a poll applied in a transaction of its own, on its own connection, at the
// same time as the poll's other lanes (Config.Lanes; docs/design.md#transactions-and-locks).
//
// pollIdentities are the identities of a poll's items (identities), item i's at
// ids[at[i]:at[i+1]]: computed once per poll for both of inLanes' splits.
type pollIdentities struct {
	ids []identity
	at  []int
}

func pollIdentitiesOf(items []item) pollIdentities {
	p := pollIdentities{ids: make([]identity, 0, 6*len(items)), at: make([]int, 1, len(items)+1)}
	for i := range items {
		p.ids = items[i].appendIdentities(p.ids)
		p.at = append(p.at, len(p.ids))
	}
	return p
}

// split divides the poll whose identities are p (len(p.at)-1 items, at least 2) into at most n
// lanes (n ≥ 2): records that share an intent, an idempotency key, an event id, a subject (the
// booking or payment an operation acts on) or a reference — the identities the poll's records
// lock, claim or deduplicate on — are in one lane, in poll order, and so are records that links
// (storedLinks: the poll's identities → those its stored rows link them to) joins: a key's
// stored attempt's intent, a key's kept decisions' references, a reference's stored holder's
// intent. Records that did not decode share one lane. Groups go, largest first, to the lane
// with the fewest records (ties: the earlier group, the lower lane). It returns the non-empty
// lanes in lane order, each with the indexes of its items.
func (p pollIdentities) split(n int, links map[identity][]identity) [][]int {
	items := len(p.at) - 1
	parent := indexes(items)
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	first := make(map[identity]int, len(p.ids))
	join := func(i int, id identity) {
		if j, ok := first[id]; ok {
			a, b := find(i), find(j)
			parent[max(a, b)] = min(a, b) // a group's root is its first item
		} else {
			first[id] = i
		}
	}
	for i := range items {
		for _, id := range p.ids[p.at[i]:p.at[i+1]] {
			join(i, id)
			for _, l := range links[id] { // closed already (storedLinks): one level
				join(i, l)
			}
		}
	}
	size := make([]int, items) // by root
	var roots []int
	for i := range items {
		r := find(i)
		if size[r] == 0 {
			roots = append(roots, r)
		}
		size[r]++
	}
	slices.SortFunc(roots, func(a, b int) int { return cmp.Or(cmp.Compare(size[b], size[a]), cmp.Compare(a, b)) })
	n = min(n, len(roots))
	load := make([]int, n)
	lane := make([]int, items) // by root
	for _, r := range roots {
		l := 0
		for i := 1; i < n; i++ {
			if load[i] < load[l] {
				l = i
			}
		}
		lane[r], load[l] = l, load[l]+size[r]
	}
	out := make([][]int, n)
	for i := range out {
		out[i] = make([]int, 0, load[i])
	}
	for i := range items {
		l := lane[find(i)]
		out[l] = append(out[l], i)
	}
	return out
}

// identity is one thing the write path keys rows on — a kind and up to two strings — hashed
// (identityOf): two different ones that hash alike (about one pair in 2^64) only put their
// records in one lane, which is always safe.
type identity uint64

// identityKey is an identity before hashing.
type identityKey struct {
	kind byte
	a, b string
}

// identitySeed is the process's seed of identityOf.
var identitySeed = maphash.MakeSeed()

func identityOf(kind byte, a, b string) identity {
	return identity(maphash.Comparable(identitySeed, identityKey{kind, a, b}))
}

// appendIdentities appends what the item's record touches (pollIdentities.split): for an attempt event
// its tenant's intent, idempotency key and event id, its subject, and the references of its
// recovery identities (provider, payment, client, provider idempotency key) and of its
// outcome; for a decision its intent, key, event id and reference; one shared identity for
// every record that did not decode.
func (it *item) appendIdentities(ids []identity) []identity {
	switch {
	case it.attempt != nil:
		a := it.attempt
		ids = append(ids, identityOf('i', a.TenantID, a.BookingIntentID), identityOf('k', a.TenantID, a.IdempotencyKey),
			identityOf('e', a.TenantID, a.EventID), refIdentity(a.KeySubject))
		r := a.Recovery
		ids = appendRefs(ids, r.ProviderReference, r.PaymentReference, r.ClientReference, r.ProviderIdempotencyKey)
		if o := a.Outcome; o != nil {
			ids = appendRefs(ids, o.ProviderReference)
		}
		return ids
	case it.decision != nil:
		d := it.decision
		ids = append(ids, identityOf('i', d.TenantID, d.BookingIntentID), identityOf('k', d.TenantID, d.IdempotencyKey),
			identityOf('e', d.TenantID, d.EventID))
		return appendRefs(ids, d.ProviderReference)
	}
	return append(ids, identityOf('x', "", ""))
}

// refIdentity is a reference's identity. References are compared without their tenant or
// provider, and a subject is one too: grouping more than needed only makes a lane larger.
func refIdentity(ref string) identity { return identityOf('r', ref, "") }

// appendRefs adds a reference identity (refIdentity) for each non-empty ref.
func appendRefs(ids []identity, refs ...string) []identity {
	for _, r := range refs {
		if r != "" {
			ids = append(ids, refIdentity(r))
		}
	}
	return ids
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// applyLanes decodes data once and applies its lanes (inLanes) at once, each retried on its
// own with backoff while its transaction fails (pause: metric, /readyz, log; pollSize is for the
// log). It returns nil once every lane has committed, and ctx's error when ctx ends first (the
// lanes that committed stand; the poll's offsets are not committed, so its replay is
// deduplicated by processed_event).
func (in *Ingester) applyLanes(ctx context.Context, data []*kgo.Record, pollSize int) error {
	return in.inLanes(ctx, in.decodeAll(data), func(lane []item) error { return in.applyRetrying(ctx, lane, pollSize) })
}

// inLanes splits items into lanes (split, Config.Lanes) and calls apply with each lane's
// items, every lane on a goroutine of its own (a single lane on the caller's); it returns once
// all have returned, with their errors joined. When the poll's own identities give more than one
// group it first reads what the poll's stored rows link (storedLinks, bounded by
// Config.BatchTimeout), so the lanes leave the database one lane leaves; when that read fails the
// poll is applied as one lane (its retries pause as any batch's).
func (in *Ingester) inLanes(ctx context.Context, items []item, apply func(lane []item) error) error {
	if in.cfg.Lanes <= 1 {
		return apply(items)
	}
	if len(items) < 2 {
		return apply(items)
	}
	ids := pollIdentitiesOf(items)
	lanes := ids.split(in.cfg.Lanes, nil)
	if len(lanes) > 1 {
		rctx, cancel := context.WithTimeout(ctx, in.cfg.BatchTimeout)
		links, err := in.storedLinks(rctx, items)
		cancel()
		if err != nil {
			in.log.Warn("reading the poll's stored links failed; applying it as one lane", "records", len(items), "err", err)
			return apply(items)
		}
		lanes = ids.split(in.cfg.Lanes, links)
	}
	if len(lanes) == 1 {
		return apply(items)
	}
	errs := make([]error, len(lanes))
	var wg sync.WaitGroup
	for l, idx := range lanes {
		lane := make([]item, len(idx))
		for j, i := range idx {
			lane[j] = items[i]
		}
		wg.Go(func() { errs[l] = apply(lane) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// applyRetrying applies one lane until its transaction commits; a retry decodes the lane's
// records again (the retention bound may have moved meanwhile). Each try is bounded by
// Config.BatchTimeout, so a hung database pauses the lane too. It returns ctx's error when ctx
// ends first.
func (in *Ingester) applyRetrying(ctx context.Context, items []item, pollSize int) error {
	b := pauseBackoff()
	for {
		bctx, cancel := context.WithTimeout(ctx, in.cfg.BatchTimeout)
		err := in.applyItems(bctx, items)
		cancel()
		if err == nil {
			return nil
		}
		if err := in.pause(ctx, b, pollSize, err); err != nil {
			return err
		}
		recs := make([]*kgo.Record, len(items))
		for i := range items {
			recs[i] = items[i].rec
		}
		items = in.decodeAll(recs)
	}
}
