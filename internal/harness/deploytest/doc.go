// Package deploytest holds the tests of the deployment and observability artefacts, which have
// no Go code of their own: deploy/prometheus (promtool checks and unit tests, runbooks),
// deploy/grafana (dashboards and provisioning), docker-compose.yml and the Dockerfile, and
// docs/metrics.md. It starts the ingester, reconciler, escalator and query API in-process on
// the real broker and a fresh database, and checks that every metric the rules and dashboards
// name exists in their exposition, that the exposition passes client_golang's lint, that the
// logs are one JSON stream, and that docs/metrics.md is the catalogue of what they export
// (regenerate it with `go test ./internal/deploytest -run TestServicesExposition -update`).
package deploytest
