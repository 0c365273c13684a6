package events

// The old decode path (ref_test.go), for the comparisons of the external test package, which can
// import internal/harness/loadgen (this package cannot: loadgen imports providers, which imports
// events).
var (
	RefDecodeAttemptHashed  = refDecodeAttemptHashed
	RefDecodeDecisionHashed = refDecodeDecisionHashed
	RefDigests              = refDigests
)
