// Package problem writes bookrecon's HTTP error bodies: RFC 9457 problem details
// (application/problem+json) with a stable machine-readable code (docs/api.md, "Errors"). Every /v1 route answers its 4xx and 5xx through Write; docs/api.md lists the codes.
package problem

import (
	"encoding/json"
	"net/http"
	"slices"
)

// ContentType is the media type of a problem details body (RFC 9457 section 3).
const ContentType = "application/problem+json"

// Details is one problem: RFC 9457's members type, title, status and detail, and the extension
// member code. Type is always "about:blank" (RFC 9457 section 4.2.1), so Title is the status
// code's phrase and Code, not Type, is what a client branches on.
type Details struct {
	Type string `json:"type"`
	// Title is http.StatusText(Status).
	Title string `json:"title"`
	// Status is the HTTP status code, repeated in the body.
	Status int `json:"status"`
	// Code is stable: unauthenticated, forbidden, not_found, invalid_tenant, … (docs/api.md).
	Code string `json:"code"`
	// Detail says what happened and what to do; it never quotes a request value or a secret.
	Detail string `json:"detail"`
	// Header holds response headers that go with the problem (WWW-Authenticate on a 401,
	// Retry-After on a 409 request_in_progress); not part of the body.
	Header http.Header `json:"-"`
}

// New is the problem of status with its code and detail.
func New(status int, code, detail string) *Details {
	return &Details{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// With returns a copy of d with header key set to value.
func (d *Details) With(key, value string) *Details {
	c := *d
	c.Header = d.Header.Clone()
	if c.Header == nil {
		c.Header = http.Header{}
	}
	c.Header.Set(key, value)
	return &c
}

// Error is "code: detail", so a *Details can travel as an error.
func (d *Details) Error() string { return d.Code + ": " + d.Detail }

// Write sends d as the response (its headers, Content-Type application/problem+json and
// Cache-Control no-store) and returns d.Status.
func Write(w http.ResponseWriter, d *Details) int {
	h := w.Header()
	for k, vs := range d.Header {
		h[k] = slices.Clone(vs) // d may be shared by every response (a package-level problem)
	}
	h.Set("Content-Type", ContentType)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(d.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "<token>" stays readable
	_ = enc.Encode(d)
	return d.Status
}
