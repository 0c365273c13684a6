package events

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends r's JSON to dst: exactly json.Marshal(r)'s bytes, without reflection — the
// members in field order, strings escaped as encoding/json escapes them (", \ and control
// characters; <, > and & as \u003c, \u003e, \u0026; U+2028 and U+2029 as \u escapes; invalid
// UTF-8 as \ufffd), times as time.Time's MarshalJSON writes them, a nil pointer as null. Like
// json.Marshal it fails on a time that RFC 3339 cannot hold (a year outside 0–9999, a zone
// offset of 24 hours or more); dst is then returned as it was. TestResolvedAppendJSON and
// FuzzResolvedAppendJSON hold it to json.Marshal.
func (r *Resolved) AppendJSON(dst []byte) ([]byte, error) {
	b, err := r.OutputEnvelope.appendJSON(append(dst, '{'))
	if err != nil {
		return dst, err
	}
	b = appendJSONString(append(b, `,"status":`...), r.Status)
	b = appendJSONString(append(b, `,"resolutionSource":`...), r.ResolutionSource)
	b = appendJSONStringPtr(append(b, `,"providerReference":`...), r.ProviderReference)
	b = appendJSONStringPtr(append(b, `,"failureCode":`...), r.FailureCode)
	if b, err = appendJSONTime(append(b, `,"resolvedAt":`...), r.ResolvedAt); err != nil {
		return dst, err
	}
	return append(b, '}'), nil
}

// AppendJSON appends r's JSON to dst: exactly json.Marshal(r)'s bytes, without reflection, as
// Resolved.AppendJSON writes them (amount, stay and segments left out when nil or empty, as
// their omitempty says). TestRequestAppendJSON and FuzzRequestAppendJSON hold it to json.Marshal.
func (r *Request) AppendJSON(dst []byte) []byte {
	b := appendJSONString(append(dst, `{"offerVersion":`...), r.OfferVersion)
	b = appendJSONString(append(b, `,"travellerRef":`...), r.TravellerRef)
	if a := r.Amount; a != nil {
		b = appendJSONString(append(b, `,"amount":{"value":`...), a.Value)
		b = append(appendJSONString(append(b, `,"currency":`...), a.Currency), '}')
	}
	if s := r.Stay; s != nil {
		b = appendJSONString(append(b, `,"stay":{"propertyId":`...), s.PropertyID)
		b = appendJSONString(append(b, `,"checkIn":`...), s.CheckIn)
		b = append(appendJSONString(append(b, `,"checkOut":`...), s.CheckOut), '}')
	}
	if len(r.Segments) > 0 {
		b = append(b, `,"segments":[`...)
		for i, s := range r.Segments {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(append(b, `{"from":`...), s.From)
			b = appendJSONString(append(b, `,"to":`...), s.To)
			b = appendJSONString(append(b, `,"date":`...), s.Date)
			b = append(appendJSONString(append(b, `,"flight":`...), s.Flight), '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendJSON appends e's members, as json.Marshal writes them inside an object that embeds e.
func (e *OutputEnvelope) appendJSON(b []byte) ([]byte, error) {
	b = strconv.AppendInt(append(b, `"specVersion":`...), int64(e.SpecVersion), 10)
	b = appendJSONString(append(b, `,"eventId":`...), e.EventID)
	b = appendJSONString(append(b, `,"eventType":`...), string(e.EventType))
	b, err := appendJSONTime(append(b, `,"occurredAt":`...), e.OccurredAt)
	if err != nil {
		return nil, err
	}
	b = appendJSONString(append(b, `,"tenantId":`...), e.TenantID)
	b = appendJSONString(append(b, `,"bookingIntentId":`...), e.BookingIntentID)
	b = appendJSONString(append(b, `,"idempotencyKey":`...), e.IdempotencyKey)
	b = appendJSONString(append(b, `,"operation":`...), string(e.Operation))
	b = strconv.AppendInt(append(b, `,"operationVersion":`...), int64(e.OperationVersion), 10)
	return appendJSONString(append(b, `,"provider":`...), e.Provider), nil
}

// appendJSONTime appends t as time.Time's MarshalJSON does: RFC 3339 with nanoseconds, quoted
// (only digits and -:.TZ+, nothing to escape).
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	b, err := t.AppendText(append(b, '"'))
	if err != nil {
		return nil, err
	}
	return append(b, '"'), nil
}

func appendJSONStringPtr(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendJSONString(b, *s)
}

// appendJSONString appends s quoted and escaped as encoding/json escapes a string (its
// appendString with HTML escaping, json.Marshal's default).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // the other control characters, <, > and &
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}
