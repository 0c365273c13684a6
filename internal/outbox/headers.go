package outbox

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The headers column (migrations/sql/00008_outbox_write_less.sql) holds a record's headers in a
// compact encoding that leaves out what the row says already (docs/decisions.md, "The outbox
// writes less"): a sequence of headers, each a key then a value.
//
//	key:   0, uvarint length, bytes   a literal
//	       k ≥ 1                      headerKeys[k-1]
//	value: 0, uvarint length, bytes   a literal
//	       1                          the row's event_id
//	       2                          the row's record key
//	       v ≥ 3                      headerValues[v-3]
//
// A CloudEvents resolution's headers take ~75 bytes instead of jsonb's ~454: the keys and the
// constant values are one byte each, ce_id is the event_id and ce_partitionkey the record key;
// only ce_time and ce_subject stay literal. Both lists are append-only: rows in the outbox were
// written with the codes of their day, and the down part of migration 00008 decodes those of its
// day.
var (
	headerKeys = []string{
		"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "ce_subject", "ce_partitionkey", "content-type",
		"bookrecon.dlq.reason", "bookrecon.dlq.detail", "bookrecon.source.topic", "bookrecon.source.partition", "bookrecon.source.offset",
	}
	headerValues = []string{
		"1.0", "application/json", "/bookrecon", "attempt.resolved", "escalation.opened", "escalation.closed",
	}
)

// Value codes of the header encoding (see headerKeys).
const (
	codeLiteral  = 0
	codeEventID  = 1
	codeKey      = 2
	codeValueMin = 3
)

// EncodeHeaders returns hs in the headers column's encoding for a row of eventID and record key
// key; DecodeHeaders with the same eventID and key returns hs again, byte for byte.
func EncodeHeaders(hs []Header, eventID string, key []byte) []byte {
	b := make([]byte, 0, 16*len(hs))
	for _, h := range hs {
		if i := index(headerKeys, h.Key); i >= 0 {
			b = append(b, byte(1+i))
		} else {
			b = appendLiteral(b, h.Key)
		}
		switch i := index(headerValues, h.Value); {
		case h.Value == eventID:
			b = append(b, codeEventID)
		case key != nil && h.Value == string(key):
			b = append(b, codeKey)
		case i >= 0:
			b = append(b, byte(codeValueMin+i))
		default:
			b = appendLiteral(b, h.Value)
		}
	}
	return b
}

// ErrHeaders: a headers column that is not in the encoding of EncodeHeaders (a code no list
// holds, or a length past the end).
var ErrHeaders = errors.New("outbox: malformed headers")

// DecodeHeaders returns the headers encoded in b (EncodeHeaders) for a row of eventID and
// record key key; an empty b is no headers. It returns ErrHeaders when b is malformed.
func DecodeHeaders(b []byte, eventID string, key []byte) ([]Header, error) {
	var hs []Header
	for len(b) > 0 {
		var h Header
		var err error
		if h.Key, b, err = decodeOne(b, headerKeys, 1); err != nil {
			return nil, fmt.Errorf("header %d key: %w", len(hs), err)
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("header %d value: %w: missing", len(hs), ErrHeaders)
		}
		switch b[0] {
		case codeEventID:
			h.Value, b = eventID, b[1:]
		case codeKey:
			h.Value, b = string(key), b[1:]
		default:
			if h.Value, b, err = decodeOne(b, headerValues, codeValueMin); err != nil {
				return nil, fmt.Errorf("header %d value: %w", len(hs), err)
			}
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// decodeOne reads a literal (code 0) or list[code-base] from the front of b.
func decodeOne(b []byte, list []string, base int) (string, []byte, error) {
	if c := int(b[0]); c != codeLiteral {
		if c < base || c-base >= len(list) {
			return "", nil, fmt.Errorf("%w: code %d", ErrHeaders, c)
		}
		return list[c-base], b[1:], nil
	}
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || n > uint64(len(b)-1-w) {
		return "", nil, fmt.Errorf("%w: literal length", ErrHeaders)
	}
	b = b[1+w:]
	return string(b[:n]), b[n:], nil
}

func appendLiteral(b []byte, s string) []byte {
	b = append(b, codeLiteral)
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func index(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
