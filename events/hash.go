package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/shopspring/decimal"
)

// MaxMinorUnits is the largest amount accepted, in minor units: 2^53−1, the largest integer an
// RFC 8785 (IEEE 754 double) number holds exactly, so the canonical request stays exact.
const MaxMinorUnits = 1<<53 - 1

// isDecimal reports whether s has the RFC 8259 number grammar, used for amount values in either
// form: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func isDecimal(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digitsEnd(s, i+1)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		if j := digitsEnd(s, i+1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if j := digitsEnd(s, i); j > i {
			i = j
		} else {
			return false
		}
	}
	return i == len(s)
}

// digitsEnd is the index of the first byte at or after i in s that is not an ASCII digit.
func digitsEnd(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

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
	if !isDecimal(value) {
		return bad("value", "must be a decimal number")
	}
	if n, plain, err := plainMinorUnits(value, currency, path); plain {
		return n, err
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

// plainMinorUnits is minorUnits, its checks in the same order, for a value isDecimal accepted
// that has no exponent and whose digits, with the currency's exponent, fit 18 decimal digits:
// integer arithmetic instead of decimal's. plain is false for any other value.
func plainMinorUnits(value, currency, path string) (n int64, plain bool, _ *InvalidError) {
	bad := func(name, desc string) (int64, bool, *InvalidError) {
		return 0, true, invalid(ReasonInvalidField, join(path, name), desc)
	}
	digits, negative := strings.CutPrefix(value, "-")
	whole, fraction, _ := strings.Cut(digits, ".")
	fraction = strings.TrimRight(fraction, "0")
	if strings.ContainsAny(digits, "eE") || len(whole)+len(fraction) > 18 {
		return 0, false, nil
	}
	zero := whole == "0" && fraction == ""
	if negative && !zero {
		return bad("value", "must not be negative")
	}
	exp, ok := CurrencyExponent(currency)
	switch {
	case !ok:
		return bad("currency", "must be an upper-case ISO 4217 code")
	case zero:
		return 0, true, nil
	case len(fraction) > exp:
		return bad("value", "has more decimal places than the currency allows")
	case len(whole)+exp > 18:
		return 0, false, nil
	}
	for i := range len(whole) {
		n = n*10 + int64(whole[i]-'0')
	}
	for i := range exp {
		n *= 10
		if i < len(fraction) {
			n += int64(fraction[i] - '0')
		}
	}
	if n > MaxMinorUnits {
		return bad("value", "exceeds the largest amount")
	}
	return n, true, nil
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
	return appendCheckedRequest(nil, op, r)
}

// appendCheckedRequest appends CanonicalRequest(op, r) to b, or returns its error.
func appendCheckedRequest(b []byte, op Operation, r *Request) ([]byte, error) {
	if !op.Valid() {
		return nil, invalid(ReasonInvalidField, "operation", "must be one of "+joinOps())
	}
	if r == nil {
		return nil, invalid(ReasonMissingField, "request", "required")
	}
	var minor int64
	if r.Amount != nil {
		n, err := minorUnits(r.Amount.Value, r.Amount.Currency, "request.amount")
		if err != nil {
			return nil, err
		}
		minor = n
	}
	return appendCanonicalRequest(b, op, r, minor), nil
}

// appendCanonicalRequest appends CanonicalRequest(op, r) to b, minor being r.Amount's minor
// units: the members in RFC 8785 order (all names ASCII, so UTF-16 order is byte order), each
// value written as RFC 8785 writes the json.Marshal output the hash was first defined on.
func appendCanonicalRequest(b []byte, op Operation, r *Request, minor int64) []byte {
	b = append(b, '{')
	sep := false
	member := func(name string) {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	if r.Amount != nil {
		member("amount")
		b = append(b, `{"currency":`...)
		b = appendCanonicalString(b, r.Amount.Currency)
		b = append(b, `,"minor":`...)
		b = strconv.AppendInt(b, minor, 10)
		b = append(b, '}')
	}
	if r.OfferVersion != "" {
		member("offerVersion")
		b = appendCanonicalString(b, r.OfferVersion)
	}
	member("operation")
	b = appendCanonicalString(b, string(op))
	if op.HasFingerprint() && len(r.Segments) > 0 {
		member("segments")
		b = appendSegments(b, r.Segments, false)
	}
	if op.HasFingerprint() && r.Stay != nil {
		member("stay")
		b = appendStay(b, r.Stay)
	}
	if r.TravellerRef != "" {
		member("travellerRef")
		b = appendCanonicalString(b, r.TravellerRef)
	}
	return append(b, '}')
}

// RequestHash returns the request hash of r for op: the lowercase hex SHA-256 of
// CanonicalRequest(op, r) (docs/design.md#request-hash). Equal amounts hash alike whatever their
// trailing zeros or form (string or JSON number); member order and whitespace of the original
// record never matter. Errors are those of CanonicalRequest.
func RequestHash(op Operation, r *Request) (string, error) {
	var buf [512]byte
	b, err := appendCheckedRequest(buf[:0], op, r)
	if err != nil {
		return "", err
	}
	return sha256Hex(b), nil
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
	var buf [256]byte
	b := append(buf[:0], '{')
	if r.Stay == nil {
		b = append(b, `"segments":`...)
		b = appendSegments(b, r.Segments, true)
	} else {
		b = append(b, `"stay":`...)
		b = appendStay(b, r.Stay)
	}
	if r.TravellerRef != "" {
		b = append(b, `,"travellerRef":`...)
		b = appendCanonicalString(b, r.TravellerRef)
	}
	return sha256Hex(append(b, '}'))
}

// appendStay appends s as RFC 8785 JSON: {"checkIn","checkOut","propertyId"}.
func appendStay(b []byte, s *Stay) []byte {
	b = append(b, `{"checkIn":`...)
	b = appendCanonicalString(b, s.CheckIn)
	b = append(b, `,"checkOut":`...)
	b = appendCanonicalString(b, s.CheckOut)
	b = append(b, `,"propertyId":`...)
	b = appendCanonicalString(b, s.PropertyID)
	return append(b, '}')
}

// appendSegments appends segs as an RFC 8785 array of {"date","flight","from","to"}, from, to
// and flight upper-cased when upper (the fingerprint's form).
func appendSegments(b []byte, segs []Segment, upper bool) []byte {
	b = append(b, '[')
	for i, s := range segs {
		if i > 0 {
			b = append(b, ',')
		}
		if upper {
			s.From, s.To, s.Flight = strings.ToUpper(s.From), strings.ToUpper(s.To), strings.ToUpper(s.Flight)
		}
		b = append(b, `{"date":`...)
		b = appendCanonicalString(b, s.Date)
		b = append(b, `,"flight":`...)
		b = appendCanonicalString(b, s.Flight)
		b = append(b, `,"from":`...)
		b = appendCanonicalString(b, s.From)
		b = append(b, `,"to":`...)
		b = appendCanonicalString(b, s.To)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendCanonicalString appends s as RFC 8785 writes the JSON string json.Marshal makes of it:
// each byte that is not part of valid UTF-8 becomes U+FFFD (json.Marshal's coercion), '"' and
// '\\' are escaped, control characters are \b, \t, \n, \f, \r or \u00xx (lower-case hex),
// everything else is written as is (RFC 8785 §3.2.2.2).
func appendCanonicalString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, "\ufffd"...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20:
			b = append(b, c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
	}
	return append(b, '"')
}

// CanonicalHash returns the lowercase hex SHA-256 of the RFC 8785 canonical form of a whole JSON
// record, as processed_event keeps it (docs/design.md#insert-first-dedup): member order and
// whitespace do not change it. Numbers are canonicalised as IEEE 754 doubles (RFC 8785), so 249.9
// and 249.90 hash alike. Every record DecodeAttempt or DecodeDecision accepts has one; the error
// (not an *InvalidError; it never quotes the record) is for input that is not I-JSON.
func CanonicalHash(raw []byte) (string, error) {
	h, err := canonicalHash(raw)
	if err != nil {
		return "", errors.New("events: canonical hash: record is not I-JSON")
	}
	return h, nil
}

// canonicalHash is sha256Hex(canonicalize(raw)), or canonicalize's error.
func canonicalHash(raw []byte) (string, error) {
	s := getScratch()
	h, _, ok := s.hashFast(raw)
	s.release()
	if ok {
		return h, nil
	}
	b, err := canonicalize(raw)
	if err != nil {
		return "", err
	}
	return sha256Hex(b), nil
}

// canonicalize returns the RFC 8785 canonical form of the JSON text raw, in a new slice (raw is
// left as it is). It fails on anything that is not I-JSON (RFC 7493): bad syntax, trailing data,
// duplicate member names at any depth, invalid UTF-8 or lone surrogates, numbers beyond float64.
// The implementation is jsontext's (the Go team's encoding/json/v2 text layer, as a module);
// the tests cross-check it against github.com/gowebpki/jcs, of the RFC's reference lineage. The
// texts records are made of take a faster path of the same result first (jcsWriter).
func canonicalize(raw []byte) ([]byte, error) {
	if c, ok := canonicalFast(make([]byte, 0, len(raw)), raw); ok {
		return c, nil
	}
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
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], sum[:])
	return string(text[:])
}
