package postgres

import (
	"encoding/binary"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// registerArrays makes m encode []string text[], [][]byte bytea[] and []uuid.UUID uuid[]
// parameters and COPY columns in PostgreSQL's binary array form straight from the slice, in one
// allocation — the bytes pgx's ArrayCodec writes (a nil slice is NULL, an empty one an empty
// array, a nil []byte a NULL element), without boxing every element into
// an interface and finding its plan (most of the ingester's parameter encoding, docs/performance.md
// "Where the end-to-end time goes"). Every other value, the text format and scanning keep the
// registered codec's plans. Call it after registerUUID. TestArraysBinary holds the bytes to pgx's.
func registerArrays(m *pgtype.Map) {
	for _, a := range []struct {
		oid  uint32
		plan pgtype.EncodePlan
	}{{pgtype.TextArrayOID, encodeTextArray{}}, {pgtype.ByteaArrayOID, encodeByteaArray{}}, {pgtype.UUIDArrayOID, encodeUUIDArray{}}} {
		t, ok := m.TypeForOID(a.oid)
		if !ok {
			continue
		}
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: arrayCodec{t.Codec, a.plan}})
	}
}

// arrayCodec is Codec with plan for binary parameters of plan's slice type.
type arrayCodec struct {
	pgtype.Codec
	plan pgtype.EncodePlan
}

func (c arrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch c.plan.(type) {
		case encodeTextArray:
			if _, ok := value.([]string); ok {
				return c.plan
			}
		case encodeByteaArray:
			if _, ok := value.([][]byte); ok {
				return c.plan
			}
		case encodeUUIDArray:
			if _, ok := value.([]uuid.UUID); ok {
				return c.plan
			}
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// appendArrayHeader appends a one-dimensional array's header: whether an element is NULL,
// elements of elementOID, n of them from index 1.
func appendArrayHeader(buf []byte, hasNull bool, elementOID uint32, n int) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	if hasNull {
		buf = binary.BigEndian.AppendUint32(buf, 1)
	} else {
		buf = binary.BigEndian.AppendUint32(buf, 0)
	}
	buf = binary.BigEndian.AppendUint32(buf, elementOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1) // lower bound
}

type encodeTextArray struct{}

func (encodeTextArray) Encode(value any, buf []byte) ([]byte, error) {
	a := value.([]string)
	if a == nil {
		return nil, nil
	}
	n := 20 + 4*len(a) // the header, each element's length
	for _, s := range a {
		n += len(s)
	}
	buf = appendArrayHeader(slices.Grow(buf, n), false, pgtype.TextOID, len(a))
	for _, s := range a {
		buf = append(binary.BigEndian.AppendUint32(buf, uint32(len(s))), s...)
	}
	return buf, nil
}

type encodeByteaArray struct{}

func (encodeByteaArray) Encode(value any, buf []byte) ([]byte, error) {
	a := value.([][]byte)
	if a == nil {
		return nil, nil
	}
	n, hasNull := 20+4*len(a), false
	for _, b := range a {
		n += len(b)
		hasNull = hasNull || b == nil
	}
	buf = appendArrayHeader(slices.Grow(buf, n), hasNull, pgtype.ByteaOID, len(a))
	for _, b := range a {
		if b == nil {
			buf = binary.BigEndian.AppendUint32(buf, 0xffffffff) // -1: NULL
			continue
		}
		buf = append(binary.BigEndian.AppendUint32(buf, uint32(len(b))), b...)
	}
	return buf, nil
}

type encodeUUIDArray struct{}

func (encodeUUIDArray) Encode(value any, buf []byte) ([]byte, error) {
	a := value.([]uuid.UUID)
	if a == nil {
		return nil, nil
	}
	buf = appendArrayHeader(slices.Grow(buf, 20+20*len(a)), false, pgtype.UUIDOID, len(a))
	for _, u := range a {
		buf = append(binary.BigEndian.AppendUint32(buf, 16), u[:]...)
	}
	return buf, nil
}
