package outbox

// SetTestHooks installs the relay's test signals before its first use: leaseDelay runs before
// every lease assertion, beforeMark between a round's produce and its mark.
func SetTestHooks(r *Relay, leaseDelay, beforeMark func()) {
	r.leaseDelay, r.beforeMark = leaseDelay, beforeMark
}
