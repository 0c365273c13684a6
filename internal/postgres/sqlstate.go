package postgres

// SQLSTATE classes (PostgreSQL "Appendix A. PostgreSQL Error Codes") beyond IsRetryable and
// IsDataError: which failures are the database's condition, shared by every statement, and
// which the statement's own. Every package classifies PostgreSQL errors through these
// predicates, by SQLSTATE, never by message.

// outageClasses are the SQLSTATE classes of the database's condition: connection exception
// (08), transaction rollback (40: serialization failure, deadlock), insufficient resources
// (53), operator intervention (57: admin shutdown, query canceled, statement timeout), system
// error (58) and internal error (XX).
var outageClasses = map[string]bool{"08": true, "40": true, "53": true, "57": true, "58": true, "XX": true}

// IsOutage reports whether err, not nil, is the database's condition rather than the
// statement's: an error that is not PostgreSQL's at all (a connection refused or reset, a
// timeout, a cancelled context) or one of the classes 08, 40, 53, 57, 58 and XX. The same
// statement may succeed once the condition passes: pause and retry, never blame an item.
func IsOutage(err error) bool {
	if err == nil {
		return false
	}
	c := SQLState(err)
	return len(c) < 2 || outageClasses[c[:2]]
}

// IsStatementError reports whether err is PostgreSQL refusing the statement for what it is or
// for its data: a PostgreSQL error that is no outage (IsOutage) — data exceptions (22),
// integrity violations (23) and program limits (54), which IsDataError pins on one item, but
// also syntax, schema and privilege errors (42) and the other classes. A set-based statement
// that fails so is retried item by item, to isolate the item (IsDataError) or fail the same way
// on each.
func IsStatementError(err error) bool { return SQLState(err) != "" && !IsOutage(err) }

// IsCreateRace reports whether a CREATE … IF NOT EXISTS failed because another session created
// the same object at the same moment: 42P07 (duplicate_table), or 23505 (unique_violation) when
// the two sessions raced on the catalog row. The object exists: go on. Only meaningful for a
// CREATE statement (a 23505 elsewhere is a data error).
func IsCreateRace(err error) bool {
	c := SQLState(err)
	return c == "42P07" || c == "23505"
}

// IsUnmigrated reports whether err is PostgreSQL saying a table or column the statement names
// does not exist: 42P01 (undefined_table) or 42703 (undefined_column). The statements are
// tested against the migrated schema, so this means the database is not the intended one, or
// its schema is missing or of another version than this binary's (`bookrecon migrate`, or a
// service, which migrates first, brings it to this binary's).
func IsUnmigrated(err error) bool {
	c := SQLState(err)
	return c == "42P01" || c == "42703"
}
