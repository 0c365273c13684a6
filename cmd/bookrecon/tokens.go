package main

// bookrecon tokens init|add|list|revoke: the tokens file of the services' bearer tokens
// (internal/auth; docs/api.md, "Tokens"). Only hashes are stored; add shows the token once.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/service"
)

type tokensCmd struct {
	Init   tokensInitCmd   `cmd:"" help:"Create an empty tokens file unless one exists (a service refuses to start without one)."`
	Add    tokensAddCmd    `cmd:"" help:"Issue a token: printed once on stdout, never again; only its SHA-256 is stored."`
	List   tokensListCmd   `cmd:"" help:"List the tokens by id (the first 12 hex digits of the hash), tenant, principal and scopes; never a token."`
	Revoke tokensRevokeCmd `cmd:"" help:"Revoke the tokens of --tenant and --principal, or the one of --id; the services refuse them once they re-read the file."`
}

// tokensFile is the file every tokens subcommand edits.
type tokensFile struct {
	File string `env:"BOOKRECON_TOKENS_FILE" placeholder:"PATH" help:"The tokens file: the services' BOOKRECON_TOKENS_FILE."`
}

// Validate requires the file (a usage error, exit 80). Not a kong required tag: the other
// subcommands of this binary do not need it.
func (f tokensFile) Validate() error {
	if f.File == "" {
		return errors.New("--file (BOOKRECON_TOKENS_FILE) is required: the tokens file the services read")
	}
	return nil
}

// read reads and validates the file.
func (f tokensFile) read() (auth.File, error) { return auth.ReadFile(f.File) }

type tokensInitCmd struct{ tokensFile }

func (c *tokensInitCmd) Run() error { return c.run(os.Stdout) }

func (c *tokensInitCmd) run(out io.Writer) error {
	created, err := auth.CreateFile(c.File)
	switch {
	case err != nil:
		return err
	case !created:
		_, err = fmt.Fprintf(out, "%s exists; unchanged\n", c.File)
	default:
		_, err = fmt.Fprintf(out, "%s created with no token: issue one with bookrecon tokens add\n", c.File)
	}
	return err
}

type tokensAddCmd struct {
	Tenant    string   `required:"" placeholder:"T" help:"The one tenant the token acts for."`
	Principal string   `required:"" placeholder:"P" help:"The calling service (one per service, shared by its instances): with the tenant, the scope of its Idempotency-Keys."`
	Scope     []string `required:"" placeholder:"S" help:"A scope to grant: attempts:read, attempts:write, ops (repeat the flag, or separate with commas)."`
	tokensFile
}

func (c *tokensAddCmd) Run() error { return c.run(os.Stdout, os.Stderr, time.Now()) }

// run adds a fresh token to the file, which must exist (tokens init creates it: a mistyped --file
// must not create a file no service reads), and writes the token alone on out — before the file,
// so that a token that could not be written out is never put in force — and what was done on
// info.
func (c *tokensAddCmd) run(out, info io.Writer, now time.Time) error {
	tok, hash := auth.NewToken()
	e := auth.Entry{SHA256: hash, Tenant: c.Tenant, Principal: c.Principal, Created: now.UTC().Truncate(time.Second)}
	for _, s := range c.Scope {
		e.Scopes = append(e.Scopes, auth.Scope(s))
	}
	if err := (auth.File{Tokens: []auth.Entry{e}}).Validate(); err != nil { // the flags, before the file
		return exitError{code: service.ExitUsage, err: fmt.Errorf("tokens add: %w", err)}
	}
	printed := false
	err := auth.UpdateFile(c.File, false, func(f *auth.File) error {
		f.Tokens = append(f.Tokens, e)
		if err := f.Validate(); err != nil {
			return exitError{code: service.ExitUsage, err: fmt.Errorf("tokens add: %w", err)}
		}
		// The token goes out before the file is written: a token nobody could read (stdout
		// closed or full) is never put in force.
		if _, err := fmt.Fprintln(out, tok); err != nil {
			return fmt.Errorf("tokens add: writing the token: %w; nothing was added", err)
		}
		printed = true
		return nil
	})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("tokens add: %s does not exist: create it with bookrecon tokens init, or check --file (BOOKRECON_TOKENS_FILE)", c.File)
	case err != nil && printed:
		return fmt.Errorf("tokens add: %w; the token printed is not in force", err)
	case err != nil:
		return err
	}
	_, err = fmt.Fprintf(info, "token %s for %s/%s (%s) added to %s. It is shown only now: hand it to the caller's secret store; "+
		"the services accept it once they re-read the file (at once when they watch it, else on SIGHUP).\n",
		hash[:auth.TokenIDLen], c.Tenant, c.Principal, scopes(e.Scopes), c.File)
	return err
}

func scopes(ss []auth.Scope) string {
	s := make([]string, len(ss))
	for i, sc := range ss {
		s[i] = string(sc)
	}
	return strings.Join(s, ",")
}

type tokensListCmd struct {
	tokensFile
	outputFlags
}

func (c *tokensListCmd) Run() error { return c.run(os.Stdout) }

// tokenRow is a listed token: its id, never its hash in full nor the token.
type tokenRow struct {
	ID        string       `json:"id"`
	Tenant    string       `json:"tenant"`
	Principal string       `json:"principal"`
	Scopes    []auth.Scope `json:"scopes"`
	Created   *time.Time   `json:"created"`
}

func (c *tokensListCmd) run(out io.Writer) error {
	f, err := c.read()
	if err != nil {
		return err
	}
	rows := make([]tokenRow, 0, len(f.Tokens))
	for _, e := range f.Tokens {
		r := tokenRow{ID: e.SHA256[:auth.TokenIDLen], Tenant: e.Tenant, Principal: e.Principal, Scopes: e.Scopes}
		if !e.Created.IsZero() {
			t := e.Created.UTC()
			r.Created = &t
		}
		rows = append(rows, r)
	}
	if c.JSON {
		return writeJSON(out, rows)
	}
	tw := table(out)
	fmt.Fprintln(tw, "ID\tTENANT\tPRINCIPAL\tSCOPES\tCREATED")
	for _, r := range rows {
		created := "-"
		if r.Created != nil {
			created = stamp(*r.Created)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Tenant, r.Principal, scopes(r.Scopes), created)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%d tokens\n", len(rows))
	return err
}

type tokensRevokeCmd struct {
	Tenant    string `placeholder:"T" help:"With --principal: revoke every token of this principal of this tenant."`
	Principal string `placeholder:"P" help:"With --tenant: the principal whose tokens to revoke."`
	ID        string `name:"id" placeholder:"HEX" help:"Revoke the one token whose id (hash) starts with these hex digits (at least 8; bookrecon tokens list shows ids)."`
	tokensFile
}

var idPrefix = regexp.MustCompile(`^[0-9a-f]{8,64}$`)

// Validate requires --tenant and --principal, or --id alone (a usage error, exit 80).
func (c *tokensRevokeCmd) Validate() error {
	switch {
	case c.File == "":
		return c.tokensFile.Validate()
	case c.ID != "" && (c.Tenant != "" || c.Principal != ""):
		return errors.New("give --id, or --tenant and --principal, not both")
	case c.ID != "" && !idPrefix.MatchString(c.ID):
		return errors.New("--id must be at least 8 lowercase hex digits of a token's id (bookrecon tokens list)")
	case c.ID == "" && (c.Tenant == "" || c.Principal == ""):
		return errors.New("give --tenant and --principal, or --id")
	}
	return nil
}

func (c *tokensRevokeCmd) Run() error { return c.run(os.Stdout) }

func (c *tokensRevokeCmd) run(out io.Writer) error {
	var kept, gone []auth.Entry
	err := auth.UpdateFile(c.File, false, func(f *auth.File) error {
		for _, e := range f.Tokens {
			if c.ID != "" && strings.HasPrefix(e.SHA256, c.ID) || c.ID == "" && e.Tenant == c.Tenant && e.Principal == c.Principal {
				gone = append(gone, e)
			} else {
				kept = append(kept, e)
			}
		}
		switch {
		case len(gone) == 0:
			return exitError{code: service.ExitUsage, err: errors.New("tokens revoke: no such token in " + c.File + " (bookrecon tokens list shows them); nothing changed")}
		case c.ID != "" && len(gone) > 1:
			return exitError{code: service.ExitUsage, err: fmt.Errorf("tokens revoke: --id %s matches %d tokens: give more digits; nothing changed", c.ID, len(gone))}
		}
		f.Tokens = kept
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range gone {
		if _, err := fmt.Fprintf(out, "revoked %s %s/%s\n", e.SHA256[:auth.TokenIDLen], e.Tenant, e.Principal); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(out, "%d tokens left in %s; the services refuse the revoked ones once they re-read it (at once when they watch it, else on SIGHUP)\n", len(kept), c.File)
	return err
}
