// Package providers is the provider port of bookrecon: the one question the reconciler may ask a
// travel provider ("which records do you hold for this reference or fingerprint?"), the records
// and classified errors it gets back, and the capability map that says, per provider, which
// questions make sense and how far a not-found can be trusted (docs/design.md#reconciliation).
//
// What it holds:
//
//   - [Provider], [Query], [Record]: the port. A lookup reports records or a classified error and
//     nothing else; zero records is a result (not found), never an error.
//   - [Error], [ErrorClass], [ClassOf], [RetryAfter] and the Err sentinels: every failure of a
//     lookup is one of four classes (timeout, 5xx, rate_limited, contract), told apart with
//     errors.Is / errors.As, never by message text.
//   - [Capabilities], [Map], [ParseMap], [LoadMap]: the capability map in the format of
//     samples/providers.yaml, with the documented defaults applied.
//   - [NewHTTP]: the adapter for providers that answer the HTTP lookup shape served by
//     providers/simulator.
//
// What it leaves to others: the reconciler alone owns retry policy, backoff, deadlines and the
// interpretation of a record (matching, authoritative not-found); this package never retries,
// never sleeps and never calls a create endpoint. The simulator lives in providers/simulator and
// the conformance suite every adapter must pass in providers/providertest.
package providers
