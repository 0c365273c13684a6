package postgres

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// registerUUID makes m encode google/uuid's uuid.UUID and scan into *uuid.UUID in PostgreSQL's
// binary uuid form, 16 bytes, as pgx does for its own pgtype.UUID — for uuid and uuid[]
// parameters, COPY columns and results. Without it pgx finds uuid.UUID's driver.Valuer and
// sql.Scanner methods first and formats and parses the 36-character text form (~7% of the
// ingester's CPU, docs/performance.md "Where the end-to-end time goes"). The values stored and
// read are the same. The text format (the simple protocol) keeps pgx's own plans.
func registerUUID(m *pgtype.Map) {
	t := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}}
	m.RegisterType(t)
	m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: t}})
}

// uuidCodec is pgtype.UUIDCodec with binary plans for uuid.UUID.
type uuidCodec struct{ pgtype.UUIDCodec }

func (c uuidCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case uuid.UUID, *uuid.UUID:
			return encodeUUIDBinary{}
		}
	}
	return c.UUIDCodec.PlanEncode(m, oid, format, value)
}

func (c uuidCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if _, ok := target.(*uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return scanUUIDBinary{}
	}
	return c.UUIDCodec.PlanScan(m, oid, format, target)
}

type encodeUUIDBinary struct{}

// Encode writes a nil *uuid.UUID as NULL.
func (encodeUUIDBinary) Encode(value any, buf []byte) ([]byte, error) {
	switch u := value.(type) {
	case uuid.UUID:
		return append(buf, u[:]...), nil
	case *uuid.UUID:
		if u == nil {
			return nil, nil
		}
		return append(buf, u[:]...), nil
	}
	return nil, fmt.Errorf("postgres: cannot encode %T as uuid", value)
}

type scanUUIDBinary struct{}

// Scan leaves dst as it is on NULL, as uuid.UUID's own Scan does.
func (scanUUIDBinary) Scan(src []byte, dst any) error {
	if src == nil {
		return nil
	}
	if len(src) != 16 {
		return fmt.Errorf("postgres: uuid of %d bytes, want 16", len(src))
	}
	copy(dst.(*uuid.UUID)[:], src)
	return nil
}
