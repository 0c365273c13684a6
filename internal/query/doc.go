// Package query is bookrecon's read side: the answers booking services and ops people ask of
// PostgreSQL, never a write.
//
// For booking services it serves a read-only HTTP API (API, Run; docs/design.md#query-api):
//
//	GET /v1/tenants/{tenant}/intents/{intent}
//	    → {"tenantId","bookingIntentId","status","canBuyAgain","latestVersion"}
//	GET /v1/tenants/{tenant}/intents/{intent}/operations/{operation}/retry-gate[?subject=S]
//	    → {"allowed","reason","latestVersion","latestStatus"}
//
// Every route first authorizes the request (internal/auth: a bearer token with attempts:read for
// the path's tenant; 401 unauthenticated, 403 forbidden), before it validates anything; every
// error is an RFC 9457 problem (internal/problem; docs/api.md). Run serves /metrics, /livez and
// /readyz on the admin address, never on the API's.
//
// The status is the traveller-facing state of the intent's highest BOOK version: confirmed,
// failed, or being_verified for IN_PROGRESS and UNKNOWN (the word "unknown" never reaches a
// traveller). canBuyAgain is the retry gate's answer for BOOK.
//
// The retry gate (Gate, Judge) answers docs/design.md#safe-retry-gate for the next
// version of (intent, operation, subject): version latest+1 is judged with attempt.SafeRetry
// against every stored version, with its start = now and maxVersions from the capability map
// entry of the latest version's provider. It is the same rule the pipeline applies when that
// version's start arrives, so a producer that retries only when allowed is never counted as a
// blind retry, except where the facts change in between (an earlier version's late event).
//
// For ops it offers the queries behind the bookrecon CLI: Escalations (list with filters),
// EscalationByID (one escalation with its attempt and history), History (an attempt's audit
// trail). Manual decisions are published to Kafka by the CLI; this package does not write.
//
// What it leaves to others: every state change is the ingester's and reconciler's; escalations
// are raised by the pipeline; schema migrations are run by the services or `bookrecon migrate`
// (the query API does not migrate, and its /readyz fails until the schema exists).
package query
