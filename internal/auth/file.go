package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/goccy/go-yaml"
)

// Scope is a permission a token grants (docs/api.md, "Authentication"; the specification's Part 2).
type Scope string

// The scopes.
const (
	// ScopeAttemptsRead reads attempts: every query API route.
	ScopeAttemptsRead Scope = "attempts:read"
	// ScopeAttemptsWrite begins attempts and reports outcomes (the Producer API).
	ScopeAttemptsWrite Scope = "attempts:write"
	// ScopeOps is for operators' tools (the MCP endpoint).
	ScopeOps Scope = "ops"
)

// Scopes returns every scope, in the order above.
func Scopes() []Scope { return []Scope{ScopeAttemptsRead, ScopeAttemptsWrite, ScopeOps} }

// TokenPrefix starts every token NewToken makes, so a leaked token is recognisable (by a secret
// scanner, in a log someone pasted) and a hash pasted in its place is not mistaken for one.
const TokenPrefix = "bookrecon_"

// tokenBytes is the randomness of a token: 256 bits.
const tokenBytes = 32

// tokenPattern matches a token NewToken makes (TokenPrefix and 43 base64url characters), and
// a mistyped or truncated one of at least 8.
var tokenPattern = regexp.MustCompile(regexp.QuoteMeta(TokenPrefix) + `[A-Za-z0-9_-]{8,}`)

// Redact replaces every token in s with TokenPrefix and "[redacted]", for messages that may echo
// what a user typed (a token pasted as an argument: "unexpected argument bookrecon_…"), so that
// secrets never appear in output.
func Redact(s string) string { return tokenPattern.ReplaceAllString(s, TokenPrefix+"[redacted]") }

// NewToken returns a fresh bearer token: TokenPrefix then 32 bytes from crypto/rand in
// unpadded base64url (53 characters in all), and its Hash. Show the token once to whoever will
// use it and store only the hash.
func NewToken() (token, hash string) {
	b := make([]byte, tokenBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return token, Hash(token)
}

// Hash is the SHA-256 of token in lowercase hex (64 digits): what the tokens file stores.
func Hash(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// Entry is one token of the tokens file: its hash and what it grants.
type Entry struct {
	// SHA256 is Hash(token): 64 lowercase hex digits.
	SHA256 string `yaml:"sha256" json:"sha256"`
	// Tenant is the one tenant the token acts for: [A-Za-z0-9_-]{1,64}, as tenantId.
	Tenant string `yaml:"tenant" json:"tenant"`
	// Principal names the calling service (one principal per service, shared by its instances;
	// the scope of its Idempotency-Keys): [A-Za-z0-9._-]{1,64}.
	Principal string `yaml:"principal" json:"principal"`
	// Scopes are the permissions granted: at least one, each once.
	Scopes []Scope `yaml:"scopes,flow" json:"scopes"`
	// Created is when the token was added (informational; optional).
	Created time.Time `yaml:"created,omitempty" json:"created,omitzero"`
}

// File is the tokens file (BOOKRECON_TOKENS_FILE), YAML (docs/api.md, "Tokens"):
//
//	tokens:
//	  - sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//	    tenant: t_globetrek
//	    principal: checkout
//	    scopes: [attempts:read, attempts:write]
//	    created: 2026-12-01T12:00:00Z
//
// It holds hashes only, never a token. `bookrecon tokens add|list|revoke` manage it.
type File struct {
	Tokens []Entry `yaml:"tokens" json:"tokens"`
}

var (
	hashPattern      = regexp.MustCompile(`^[0-9a-f]{64}$`)
	tenantPattern    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	principalPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
)

// ErrFile marks a tokens file that cannot be read or does not validate.
var ErrFile = errors.New("auth: tokens file")

// ParseFile reads a tokens file's content and validates every entry, reporting every problem at
// once (errors.Join), each wrapping ErrFile. A YAML error is reported by position only: the file
// may hold something pasted by mistake, and its text never reaches a log. Content without a
// tokens: key — empty, or comments only: a file being written in place or cut short — is an
// error too, so a re-read in the middle of an editor's write keeps the tokens in force.
func ParseFile(data []byte) (File, error) {
	var f File
	if err := yaml.UnmarshalWithOptions(data, &f, yaml.Strict()); err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil {
			p := ye.GetToken().Position
			return File{}, fmt.Errorf("%w: not valid at line %d, column %d (want a tokens: list of sha256, tenant, principal, scopes)", ErrFile, p.Line, p.Column)
		}
		return File{}, fmt.Errorf("%w: not valid YAML (want a tokens: list of sha256, tenant, principal, scopes)", ErrFile)
	}
	// A file without its tokens: key is one being written in place (an editor's truncate, then
	// write) or cut short, never one the tokens commands wrote (an empty list is "tokens: []"):
	// read as no token, it would refuse every request until the next change.
	var keys map[string]any
	err := yaml.Unmarshal(data, &keys)
	if _, ok := keys["tokens"]; err != nil || !ok {
		return File{}, fmt.Errorf("%w: empty or without its tokens: key (being written, or cut short?); a file with no token says tokens: [] (bookrecon tokens init)", ErrFile)
	}
	return f, f.Validate()
}

// Validate reports every invalid entry of f, each wrapping ErrFile: a hash that is not 64
// lowercase hex digits (or is a token: one that must be replaced), a hash listed twice, a tenant
// or principal out of format, no scope, an unknown or repeated scope. Messages name the entry
// and never quote a hash.
func (f File) Validate() error {
	var errs []error
	bad := func(i int, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: tokens[%d]: %s", ErrFile, i, fmt.Sprintf(format, a...)))
	}
	seen := map[string]int{}
	for i, e := range f.Tokens {
		switch {
		case strings.HasPrefix(e.SHA256, TokenPrefix):
			bad(i, "sha256 holds a token, not its hash: remove the entry, and issue a new token with bookrecon tokens add (this one is exposed)")
		case !hashPattern.MatchString(e.SHA256):
			bad(i, "sha256 must be 64 lowercase hex digits: the SHA-256 of the token")
		default:
			if j, dup := seen[e.SHA256]; dup {
				bad(i, "the same hash as tokens[%d]", j)
			}
			seen[e.SHA256] = i
		}
		if !tenantPattern.MatchString(e.Tenant) {
			bad(i, "tenant must match [A-Za-z0-9_-]{1,64}")
		}
		if !principalPattern.MatchString(e.Principal) {
			bad(i, "principal must match [A-Za-z0-9._-]{1,64}")
		}
		if len(e.Scopes) == 0 {
			bad(i, "no scopes: give at least one of %s", scopeList())
		}
		for k, s := range e.Scopes {
			if !slices.Contains(Scopes(), s) {
				bad(i, "scope %q is none of %s", s, scopeList())
			} else if slices.Index(e.Scopes, s) < k {
				bad(i, "scope %s given twice", s)
			}
		}
	}
	return errors.Join(errs...)
}

func scopeList() string {
	s := make([]string, 0, 3)
	for _, sc := range Scopes() {
		s = append(s, string(sc))
	}
	return strings.Join(s, ", ")
}

// ReadFile reads and validates the tokens file at path (see ParseFile). A missing file is an
// error wrapping both ErrFile and fs.ErrNotExist.
func ReadFile(path string) (File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("%w %s: %w", ErrFile, path, err)
	}
	f, err := ParseFile(data)
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// fileHeader starts every file WriteFile writes.
const fileHeader = "# bookrecon tokens file: SHA-256 hashes of bearer tokens, never a token (docs/api.md, \"Tokens\").\n" +
	"# Managed by bookrecon tokens add|list|revoke; services re-read it on change and on SIGHUP.\n"

// WriteFile validates f and replaces the file at path atomically with it: written to a
// temporary file in the same folder, synced, renamed over path, and the folder synced, so a
// service re-reading it sees the old file or the new one, never a part. A new file is mode 0600;
// a file that exists keeps its mode, owner and group (a service running as another user that
// reads it through its group keeps reading it — else a revocation would silently not apply),
// and an error is returned before anything is replaced when they cannot be kept. A symbolic link
// at path is followed: the file it names is replaced, the link stays.
func WriteFile(path string, f File) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if f.Tokens == nil {
		f.Tokens = []Entry{}
	}
	body, err := yaml.MarshalWithOptions(f, yaml.IndentSequence(true))
	if err != nil {
		return err
	}
	data := append([]byte(fileHeader), body...)
	path = resolve(path)
	mode, owner := os.FileMode(0o600), (*syscall.Stat_t)(nil)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
		owner, _ = fi.Sys().(*syscall.Stat_t)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrFile, path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename; removes a failed write's leftovers
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil && owner != nil {
		if err = tmp.Chown(int(owner.Uid), int(owner.Gid)); err != nil {
			err = fmt.Errorf("keeping its owner %d:%d (run as that user, or as root): %w", owner.Uid, owner.Gid, err)
		}
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrFile, path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
