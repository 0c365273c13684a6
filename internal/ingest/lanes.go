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
// ids[at[i]:at[i+1]]: computed once per poll for both of planLanes' splits.
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
	lanes, _ := p.splitAfter(n, links, nil, false)
	return lanes
}

// reach is what the groups of a poll's split (pollIdentities.splitAfter) joined: every identity
// of their records, the identities links joined them to, and the identities of the groups of the
// poll before it that they joined — each identity in one group. The rows a poll's records write
// link identities of one of its groups, so a poll whose links were read while this one's lanes
// were in flight is split as if its read had seen them: its records that reach a group are
// joined through it (planLanes). The links a stored row makes only together with an older one
// and a provider it brings — a decision's reference looked up at the provider of the attempt
// this poll creates, a reference this poll keeps, claimed at the provider the next poll brings —
// are in no reach: those polls are read again after the commit (needsReread, lanePlan.split).
// A group's identities carry over to the next poll's reach
// only when its records join it, so a reach stays about the size of its poll's own identities.
type reach struct {
	group map[identity]int32 // identity → its group
	ids   [][]identity       // group → its identities
}

// maxReach bounds a reach by its poll's own identities and links: past it (a long chain of
// polls that each join the one before through a hot identity) splitAfter keeps none, and the
// next poll reads its links again once this one has committed (needsReread).
func maxReach(own int) int { return 4*own + 4096 }

// splitAfter is split, the poll's records also joined through the groups of prev (the reach of
// the poll whose lanes were in flight when links was read; nil: none). With keep it also returns
// the split's reach (nil when it would exceed maxReach).
func (p pollIdentities) splitAfter(n int, links map[identity][]identity, prev *reach, keep bool) ([][]int, *reach) {
	items := len(p.at) - 1
	virtual := 0 // prev's groups are nodes items, items+1, …: joined, never placed in a lane
	if prev != nil {
		virtual = len(prev.ids)
	}
	parent := indexes(items + virtual)
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(i, j int) {
		a, b := find(i), find(j)
		parent[max(a, b)] = min(a, b) // a group's root is its first item, never one of prev's groups
	}
	first := make(map[identity]int, len(p.ids))
	join := func(i int, id identity) {
		if j, ok := first[id]; ok {
			union(i, j)
		} else {
			first[id] = i
		}
		if prev != nil {
			if g, ok := prev.group[id]; ok {
				union(i, items+int(g))
			}
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
	var r *reach
	if keep {
		r = p.reachOf(find, roots, links, prev, items)
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
	return out, r
}

// reachOf is the reach of a split whose union-find is find over items records and prev's
// groups, roots its groups' roots (splitAfter): nil past maxReach.
func (p pollIdentities) reachOf(find func(int) int, roots []int, links map[identity][]identity, prev *reach, items int) *reach {
	r := &reach{group: make(map[identity]int32, len(p.ids)), ids: make([][]identity, len(roots))}
	at := make(map[int]int32, len(roots)) // root → group
	for g, root := range roots {
		at[root] = int32(g)
	}
	add := func(g int32, id identity) {
		if _, ok := r.group[id]; !ok {
			r.group[id] = g
			r.ids[g] = append(r.ids[g], id)
		}
	}
	for i := range items {
		g := at[find(i)]
		for _, id := range p.ids[p.at[i]:p.at[i+1]] {
			add(g, id)
			for _, l := range links[id] {
				add(g, l)
			}
		}
	}
	if prev != nil {
		for pg, ids := range prev.ids {
			if g, ok := at[find(items+pg)]; ok { // joined by a record of this poll
				for _, id := range ids {
					add(g, id)
				}
			}
		}
	}
	if len(r.group) > maxReach(len(p.ids)+len(links)) {
		return nil
	}
	return r
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

// A lanePlan is a poll decoded and split into lanes (Config.Lanes): its items, their identities,
// the links its stored rows add and the split, made (planLanes) while the poll before it — the
// poll in flight — is applied (consume), so that the split is off the path between two polls.
type lanePlan struct {
	items []item
	ids   pollIdentities
	// links are what the poll's stored rows link (storedLinks); read only when its own
	// identities give more than one group.
	links map[identity][]identity
	// lanes are the split, each lane the indexes of its items (nil: one lane, every item).
	lanes [][]int
	// reach is what the split's groups joined (splitAfter); nil when unknown: one lane, past
	// maxReach, or a decision with a reference in the poll (lanePlan.split). The poll read while
	// this one is applied is split through it.
	reach *reach
	// reread: the links are read, and the poll split, only once the poll in flight has committed
	// (needsReread; resolve).
	reread bool
}

// planLanes plans the poll of items read while inFlight is applied (nil: none): it reads the
// poll's stored links when its own identities give more than one group (bounded by
// Config.BatchTimeout) and splits it through inFlight's reach, since the rows inFlight writes may
// be missing from what the read saw. It leaves the read and the split to resolve, after
// inFlight's commit, when a join could go through what inFlight writes without being in its
// reach (needsReread). inFlight's reach must be set before planLanes runs (resolve). When the read
// fails the poll is applied as one lane (its retries pause as any batch's).
func (in *Ingester) planLanes(ctx context.Context, items []item, inFlight *lanePlan) *lanePlan {
	p := &lanePlan{items: items}
	if in.cfg.Lanes <= 1 || len(items) < 2 {
		return p
	}
	p.ids = pollIdentitiesOf(items)
	if len(p.ids.split(in.cfg.Lanes, nil)) == 1 {
		return p
	}
	var prev *reach
	if inFlight != nil {
		if prev = inFlight.reach; needsReread(items, prev) {
			p.reread = true
			return p
		}
	}
	if in.readLinks(ctx, p) {
		p.split(in.cfg.Lanes, prev)
	}
	return p
}

// needsReread reports whether the links of a poll of items, read while a poll of reach prev was
// in flight, must be read again once that poll has committed: when prev is unknown, and when one
// of items' decisions is for a key that poll's records touch. A decision's reference is looked up
// among the stored claims at its key's stored attempt's provider and operation
// (booking_attempt_links); when the poll in flight creates that attempt, a read before its commit
// looks nothing up, and the claim's holder, stored long before, is in no reach.
func needsReread(items []item, prev *reach) bool {
	if prev == nil {
		return true
	}
	for i := range items {
		if d := items[i].decision; d != nil {
			if _, ok := prev.group[identityOf('k', d.TenantID, d.IdempotencyKey)]; ok {
				return true
			}
		}
	}
	return false
}

// split sets p's lanes and reach (splitAfter on its links and prev, the reach of the poll in
// flight at its read). The reach is left unknown (nil) when the poll holds a decision with a
// provider reference: kept for an attempt that does not exist yet, it is claimed when the next
// poll's event brings the key's provider, at which the reference may be held by an attempt of
// long before that no read of either poll looked up.
func (p *lanePlan) split(lanes int, prev *reach) {
	p.lanes, p.reach = p.ids.splitAfter(lanes, p.links, prev, true)
	for i := range p.items {
		if d := p.items[i].decision; d != nil && d.ProviderReference != "" {
			p.reach = nil
			return
		}
	}
}

// readLinks reads p's links (storedLinks, bounded by Config.BatchTimeout); it reports false,
// logging why unless ctx has ended, when the read failed.
func (in *Ingester) readLinks(ctx context.Context, p *lanePlan) bool {
	rctx, cancel := context.WithTimeout(ctx, in.cfg.BatchTimeout)
	defer cancel()
	var err error
	if p.links, err = in.storedLinks(rctx, p.items); err != nil {
		if ctx.Err() == nil {
			in.log.Warn("reading the poll's stored links failed; applying it as one lane", "records", len(p.items), "err", err)
		}
		return false
	}
	return true
}

// resolve completes p's split once the poll in flight at its read has committed: its links read
// and split on them alone (planLanes left it: needsReread). It is a no-op on a plan planLanes
// split.
func (in *Ingester) resolve(ctx context.Context, p *lanePlan) {
	if !p.reread {
		return
	}
	p.reread = false
	if in.readLinks(ctx, p) {
		p.split(in.cfg.Lanes, nil)
	}
}

// runPlan calls apply with each lane's items of p (resolved: planned with no poll in flight, or
// resolve called after that poll's commit), every lane on a goroutine of its own (a single lane on the
// caller's); it returns once all have returned, with their errors joined.
func (in *Ingester) runPlan(ctx context.Context, p *lanePlan, apply func(lane []item) error) error {
	if len(p.lanes) <= 1 {
		return apply(p.items)
	}
	errs := make([]error, len(p.lanes))
	var wg sync.WaitGroup
	for l, idx := range p.lanes {
		lane := make([]item, len(idx))
		for j, i := range idx {
			lane[j] = p.items[i]
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
