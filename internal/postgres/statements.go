package postgres

import (
	"bufio"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

// Statements is a set of named SQL statements read from `.sql` files, one file per table (or
// per subject), so a reviewer reads a package's SQL in one place and the Go code names what it
// runs. A file holds any number of statements, each opened by a marker line
//
//	-- name: attempt_claim_due
//
// and running to the next marker or the end of the file. Names are subject first (the table or
// the thing it reads, then the verb: outbox_mark_published, attempt_claim_due) and unique across
// the files loaded together. Comment lines after the marker stay part of the statement, so
// pg_stat_statements and pg_stat_activity show them; they may take at most MaxLeadingComment
// bytes before the first line of SQL.
type Statements struct {
	byName map[string]string
	order  []string
}

// MaxLeadingComment is the most bytes a statement's comment lines (after its marker) may take
// before its first line of SQL. pg_stat_activity shows a running statement's first 1,023 bytes
// (track_activity_query_size, default 1,024): with at most 768 bytes of comment, an operator
// looking at a session (and the bench's sampler, which names statements by verb and table) sees
// at least 255 bytes of the SQL itself, not a comment cut short.
const MaxLeadingComment = 768

var nameLine = regexp.MustCompile(`^--\s*name:\s*([a-z][a-z0-9_]*)\s*$`)

// MustLoadStatements reads every file of fsys matching pattern (fs.Glob syntax, e.g. "sql/*.sql")
// and returns their statements. It panics on a file that cannot be read, text before the first
// marker that is not a comment or blank, an empty statement, or a name defined twice: those are
// programming errors, caught by the first test that loads the package.
func MustLoadStatements(fsys fs.FS, pattern string) *Statements {
	s, err := LoadStatements(fsys, pattern)
	if err != nil {
		panic(err)
	}
	return s
}

// LoadStatements is MustLoadStatements returning the error instead of panicking.
func LoadStatements(fsys fs.FS, pattern string) (*Statements, error) {
	files, err := fs.Glob(fsys, pattern)
	if err != nil {
		return nil, fmt.Errorf("postgres: statements %q: %w", pattern, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("postgres: statements %q: no file matches", pattern)
	}
	s := &Statements{byName: map[string]string{}}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("postgres: statements: %w", err)
		}
		if err := s.parse(f, string(b)); err != nil {
			return nil, err
		}
	}
	sort.Strings(s.order)
	return s, nil
}

func (s *Statements) parse(file, text string) error {
	var name string
	var body strings.Builder
	flush := func() error {
		if name == "" {
			return nil
		}
		sql := strings.TrimSpace(body.String())
		if sql == "" {
			return fmt.Errorf("postgres: statements: %s: statement %s is empty", file, name)
		}
		if lead := leadingComment(sql); lead > MaxLeadingComment {
			return fmt.Errorf("postgres: statements: %s: statement %s: %d bytes of comment before its SQL, more than %d (pg_stat_activity would show only the comment): move the explanation to the Go code or docs", file, name, lead, MaxLeadingComment)
		}
		if _, dup := s.byName[name]; dup {
			return fmt.Errorf("postgres: statements: %s: statement %s defined twice", file, name)
		}
		s.byName[name] = sql
		s.order = append(s.order, name)
		body.Reset()
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := nameLine.FindStringSubmatch(line); m != nil {
			if err := flush(); err != nil {
				return err
			}
			name = m[1]
			continue
		}
		if name == "" {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
				return fmt.Errorf("postgres: statements: %s:%d: SQL before the first -- name: marker", file, n)
			}
			continue
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("postgres: statements: %s: %w", file, err)
	}
	return flush()
}

// leadingComment is how many bytes of sql come before its first line that is not a "--"
// comment or blank.
func leadingComment(sql string) int {
	n := 0
	for line := range strings.Lines(sql) {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			return n
		}
		n += len(line)
	}
	return n
}

// SQL returns the statement called name. It panics on an unknown name (a programming error:
// every name a package uses is run by its tests, and TestStatementsPrepare prepares them all).
func (s *Statements) SQL(name string) string {
	q, ok := s.byName[name]
	if !ok {
		panic(fmt.Sprintf("postgres: no SQL statement named %q", name))
	}
	return q
}

// Names returns every statement name, sorted.
func (s *Statements) Names() []string { return append([]string(nil), s.order...) }
