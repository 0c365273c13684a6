package postgres

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoadStatements(t *testing.T) {
	fsys := fstest.MapFS{
		"sql/a.sql": {Data: []byte("-- statements of table a\n\n-- name: a_read\n-- one row by id\nSELECT 1\n  FROM a;\n\n-- name: a_write\nUPDATE a SET x = 1\n")},
		"sql/b.sql": {Data: []byte("-- name: b_read\nSELECT 2\n")},
	}
	s, err := LoadStatements(fsys, "sql/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(s.Names(), ","), "a_read,a_write,b_read"; got != want {
		t.Errorf("names = %s, want %s", got, want)
	}
	if got, want := s.SQL("a_read"), "-- one row by id\nSELECT 1\n  FROM a;"; got != want {
		t.Errorf("a_read = %q, want %q", got, want)
	}
	if got, want := s.SQL("a_write"), "UPDATE a SET x = 1"; got != want {
		t.Errorf("a_write = %q, want %q", got, want)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `"nope"`) {
			t.Errorf("SQL(unknown) recovered %v, want a panic naming it", r)
		}
	}()
	s.SQL("nope")
}

func TestLoadStatementsRefuses(t *testing.T) {
	for name, c := range map[string]struct{ files, want string }{
		"Duplicate":   {"-- name: x\nSELECT 1\n-- name: x\nSELECT 2\n", "statement x defined twice"},
		"Empty":       {"-- name: x\n\n-- name: y\nSELECT 1\n", "statement x is empty"},
		"BeforeFirst": {"SELECT 1\n-- name: x\nSELECT 2\n", "a.sql:1: SQL before the first -- name: marker"},
		"LongComment": {"-- name: x\n" + strings.Repeat("-- "+strings.Repeat("w", 60)+"\n", 13) + "SELECT 1\n", "statement x: 832 bytes of comment before its SQL, more than 768"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadStatements(fstest.MapFS{"a.sql": {Data: []byte(c.files)}}, "*.sql")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	// 12 lines of 64 bytes: exactly MaxLeadingComment, loaded.
	ok := "-- name: x\n" + strings.Repeat("-- "+strings.Repeat("w", 60)+"\n", 12) + "SELECT 1\n"
	if s, err := LoadStatements(fstest.MapFS{"a.sql": {Data: []byte(ok)}}, "*.sql"); err != nil {
		t.Errorf("768 bytes of comment: err = %v, want it loaded", err)
	} else if n := leadingComment(s.SQL("x")); n != 768 {
		t.Errorf("768 bytes of comment: leadingComment = %d, want 768", n)
	}
	if _, err := LoadStatements(fstest.MapFS{}, "*.sql"); err == nil || !strings.Contains(err.Error(), "no file matches") {
		t.Errorf("no files: err = %v", err)
	}
}
