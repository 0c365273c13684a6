package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/shopspring/decimal"
)

// MaxMinorUnits is the largest amount accepted, in minor units: 2^53−1, the largest integer an
// RFC 8785 (IEEE 754 double) number holds exactly, so the canonical request stays exact.
const MaxMinorUnits = 1<<53 - 1

// decimalPattern is the RFC 8259 number grammar, used for amount values in either form.
var decimalPattern = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// MinorUnits converts value, an amount in major units, to an integer count of currency's minor
// units, exactly (docs/design.md#request-hash): minor = value × 10^CurrencyExponent(currency).
//
// value uses JSON number syntax ("249.90", "24990", "2.499e2"); it is parsed as a decimal, never
// as float64, so "249.9", "249.90" and "249.900" give the same result. Errors, all
// *InvalidError{Reason: ReasonInvalidField} with Field "amount.value" or "amount.currency", in
// this order: value not in that syntax; value negative; currency not an upper-case code of the
// table; a significant digit beyond the currency's exponent (e.g. JPY "1000.5"); a result above
// MaxMinorUnits.
func MinorUnits(value, currency string) (int64, error) {
	n, err := minorUnits(value, currency, "amount")
	if err != nil {
		return 0, err
	}
	return n, nil
}

func minorUnits(value, currency, path string) (int64, *InvalidError) {
	bad := func(name, desc string) (int64, *InvalidError) {
		return 0, invalid(ReasonInvalidField, join(path, name), desc)
	}
	if !decimalPattern.MatchString(value) {
		return bad("value", "must be a decimal number")
	}
	// Trailing fraction zeros are dropped from the text first, so they can never change the
	// result, not even through decimal's exponent limit.
	mantissa, exponent, hasExp := strings.Cut(strings.ToLower(value), "e")
	if strings.Contains(mantissa, ".") {
		mantissa = strings.TrimSuffix(strings.TrimRight(mantissa, "0"), ".")
	}
	if hasExp {
		mantissa += "e" + exponent
	}
	d, err := decimal.NewFromString(mantissa)
	if err != nil {
		return bad("value", "exponent out of range")
	}
	if d.IsNegative() {
		return bad("value", "must not be negative")
	}
	exp, ok := CurrencyExponent(currency)
	if !ok {
		return bad("currency", "must be an upper-case ISO 4217 code")
	}
	if d.IsZero() {
		return 0, nil
	}
	minor := d.Shift(int32(exp)).Normalize() // coefficient × 10^e, no trailing zeros
	switch {
	case minor.Exponent() < 0:
		return bad("value", "has more decimal places than the currency allows")
	case minor.Exponent() > 15: // ≥ 10^16 > MaxMinorUnits
		return bad("value", "exceeds the largest amount")
	}
	n := new(big.Int).Mul(minor.Coefficient(), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(minor.Exponent())), nil))
	if !n.IsInt64() || n.Int64() > MaxMinorUnits {
		return bad("value", "exceeds the largest amount")
	}
	return n.Int64(), nil
}

// canonicalAmount is amount as hashed: currency and integer minor units.
type canonicalAmount struct {
	Currency string `json:"currency"`
	Minor    int64  `json:"minor"`
}

// canonicalRequest is the hashed projection of a request; absent members are omitted.
type canonicalRequest struct {
	Operation    Operation        `json:"operation"`
	OfferVersion string           `json:"offerVersion,omitempty"`
	TravellerRef string           `json:"travellerRef,omitempty"`
	Amount       *canonicalAmount `json:"amount,omitempty"`
	Stay         *Stay            `json:"stay,omitempty"`
	Segments     []Segment        `json:"segments,omitempty"`
}

// CanonicalRequest returns the RFC 8785 canonical JSON that RequestHash digests
// (docs/design.md#request-hash): an object of operation, offerVersion, travellerRef, amount
// {currency, minor} and, for BOOK and MODIFY only, stay {propertyId, checkIn, checkOut} or segments
// [{from, to, date, flight}] in the order given, values as sent. Empty strings, a nil Amount, a nil
// Stay and empty Segments are absent and omitted; nothing else of the request is included. For
// sc01:
//
//	{"amount":{"currency":"EUR","minor":24990},"offerVersion":"off_1:1","operation":"BOOK","stay":{"checkIn":"2027-02-03","checkOut":"2027-02-06","propertyId":"h_1042"},"travellerRef":"tr_0001"}
//
// Errors are *InvalidError: op not valid (invalid_field "operation"), r nil (missing_field
// "request"), or an amount MinorUnits rejects (invalid_field "request.amount.value" or
// "request.amount.currency").
func CanonicalRequest(op Operation, r *Request) ([]byte, error) {
	if !op.Valid() {
		return nil, invalid(ReasonInvalidField, "operation", "must be one of "+joinOps())
	}
	if r == nil {
		return nil, invalid(ReasonMissingField, "request", "required")
	}
	c := canonicalRequest{Operation: op, OfferVersion: r.OfferVersion, TravellerRef: r.TravellerRef}
	if r.Amount != nil {
		minor, err := minorUnits(r.Amount.Value, r.Amount.Currency, "request.amount")
		if err != nil {
			return nil, err
		}
		c.Amount = &canonicalAmount{Currency: r.Amount.Currency, Minor: minor}
	}
	if op.HasFingerprint() {
		c.Stay, c.Segments = r.Stay, r.Segments
	}
	return canonicalJSON(c)
}

// RequestHash returns the request hash of r for op: the lowercase hex SHA-256 of
// CanonicalRequest(op, r) (docs/design.md#request-hash). Equal amounts hash alike whatever their
// trailing zeros or form (string or JSON number); member order and whitespace of the original
// record never matter. Errors are those of CanonicalRequest.
func RequestHash(op Operation, r *Request) (string, error) {
	b, err := CanonicalRequest(op, r)
	if err != nil {
		return "", err
	}
	return sha256Hex(b), nil
}

// fingerprintDoc is the projection Fingerprint digests.
type fingerprintDoc struct {
	TravellerRef string    `json:"travellerRef,omitempty"`
	Stay         *Stay     `json:"stay,omitempty"`
	Segments     []Segment `json:"segments,omitempty"`
}

// Fingerprint returns the lookup fingerprint of a BOOK or MODIFY request
// (docs/design.md#request-hash): the lowercase hex SHA-256 of the RFC 8785 canonical JSON of
//
//	{"travellerRef": r.TravellerRef, "stay": {"checkIn", "checkOut", "propertyId"}}
//
// or, for a flight,
//
//	{"segments": [{"date", "flight", "from", "to"}, ...], "travellerRef": r.TravellerRef}
//
// with from, to and flight upper-cased, segments in the order given, other values as sent, and
// an empty travellerRef omitted. Stay wins when a request has both. It returns "" when op has no
// fingerprint (not BOOK or MODIFY), r is nil, or r has neither stay nor segments. The
// fingerprint does not include the operation, amount or offer.
func Fingerprint(op Operation, r *Request) string {
	if !op.HasFingerprint() || r == nil || (r.Stay == nil && len(r.Segments) == 0) {
		return ""
	}
	doc := fingerprintDoc{TravellerRef: r.TravellerRef, Stay: r.Stay}
	if r.Stay == nil {
		for _, s := range r.Segments {
			doc.Segments = append(doc.Segments, Segment{
				From:   strings.ToUpper(s.From),
				To:     strings.ToUpper(s.To),
				Date:   s.Date,
				Flight: strings.ToUpper(s.Flight),
			})
		}
	}
	b, err := canonicalJSON(doc)
	if err != nil { // unreachable: json.Marshal output of strings is always valid I-JSON
		return ""
	}
	return sha256Hex(b)
}

// CanonicalHash returns the lowercase hex SHA-256 of the RFC 8785 canonical form of a whole JSON
// record, as processed_event keeps it (docs/design.md#insert-first-dedup): member order and
// whitespace do not change it. Numbers are canonicalised as IEEE 754 doubles (RFC 8785), so 249.9
// and 249.90 hash alike. Every record DecodeAttempt or DecodeDecision accepts has one; the error
// (not an *InvalidError; it never quotes the record) is for input that is not I-JSON.
func CanonicalHash(raw []byte) (string, error) {
	b, err := canonicalize(raw)
	if err != nil {
		return "", errors.New("events: canonical hash: record is not I-JSON")
	}
	return sha256Hex(b), nil
}

// canonicalJSON marshals v and canonicalises it with RFC 8785.
func canonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	c := jsontext.Value(b)
	if err := c.Canonicalize(); err != nil {
		return nil, err
	}
	return c, nil
}

// canonicalize returns the RFC 8785 canonical form of the JSON text raw, in a new slice (raw is
// left as it is). It fails on anything that is not I-JSON (RFC 7493): bad syntax, trailing data,
// duplicate member names at any depth, invalid UTF-8 or lone surrogates, numbers beyond float64.
// The implementation is jsontext's (the Go team's encoding/json/v2 text layer, as a module);
// the tests cross-check it against github.com/gowebpki/jcs, of the RFC's reference lineage.
func canonicalize(raw []byte) ([]byte, error) {
	c := jsontext.Value(bytes.Clone(raw))
	if err := c.Canonicalize(); err != nil {
		return nil, err
	}
	// jsontext clamps a number beyond float64 to ±MaxFloat64 where I-JSON rejects it. A clamped
	// number reads 1.7976931348623157e+308, so e+308 in the canonical form (rare: a number that
	// large, or a string holding those characters) is when every number is looked at.
	if bytes.Contains(c, []byte("e+308")) {
		if err := finiteNumbers(raw); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// errNumberRange: a JSON number beyond the IEEE 754 double range (RFC 7493 §2.2).
var errNumberRange = errors.New("events: number beyond the IEEE 754 double range")

// finiteNumbers reports errNumberRange when a number of the valid JSON text raw overflows
// float64.
func finiteNumbers(raw []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if tok.Kind() == '0' {
			if _, err := strconv.ParseFloat(tok.String(), 64); err != nil {
				return errNumberRange
			}
		}
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
