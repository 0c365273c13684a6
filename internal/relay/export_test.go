package relay

// SetTestSignals installs the relay's test signals (testSignals) before its first use:
// leaseDelay runs before every lease assertion, beforeMark between a round's produce and its
// mark.
func SetTestSignals(r *Relay, leaseDelay, beforeMark func()) {
	r.testSignals = testSignals{leaseDelay: leaseDelay, beforeMark: beforeMark}
}
