// Package events is bookrecon's v1 event contract (docs/design.md#contract-v1).
//
// It holds the topic names, the typed enums of the contract (event types, operations, timeout
// classes, dead-letter reasons), the Go shapes of the two input topics (Attempt for
// booking.attempts.v1, Decision for booking.manual-decisions.v1), and the size-limited decoders
// that validate a raw Kafka record value in the normative order and return either a value or an
// *InvalidError naming the dead-letter reason.
//
// It also computes the three digests the pipeline keeps:
//
//   - RequestHash: the canonical request hash that tells an idempotent repeat from a key
//     conflict (docs/design.md#request-hash);
//   - Fingerprint: the traveller/stay or traveller/segments digest used for provider lookups
//     (docs/design.md#request-hash);
//   - CanonicalHash: the digest of a whole record kept by processed_event
//     (docs/design.md#insert-first-dedup).
//
// Canonical JSON is RFC 8785 via jsontext (github.com/go-json-experiment/json, the module form
// of encoding/json/v2), cross-checked in tests against github.com/gowebpki/jcs; money is parsed
// exactly with github.com/shopspring/decimal, never through float64.
//
// The package knows nothing about Kafka, PostgreSQL or the clock: callers pass what validation
// needs from outside (the provider capability map, the oldest kept processed_event day) through
// DecodeOptions, and they own the state machine, dead-lettering and metrics.
package events
