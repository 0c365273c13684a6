package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/internal/outbox"
)

// outboxCmd is bookrecon outbox …: the rows the relay set aside (docs/runbooks/BookreconOutboxRowsSetAside.md).
// Dead letters the relay did publish are on their topics: bookrecon dlq ….
type outboxCmd struct {
	List    outboxListCmd    `cmd:"" help:"List the outbox rows the relay set aside (the broker refused them), oldest first."`
	Retry   outboxRetryCmd   `cmd:"" help:"Release set-aside rows after fixing their cause: the relay publishes them next, then the rows their keys held back."`
	Discard outboxDiscardCmd `cmd:"" help:"Give up a set-aside row for good (never published), with a reason kept on the row; its key's later rows flow again."`
}

type outboxListCmd struct {
	Limit int `default:"100" help:"At most this many rows."`
	outputFlags
}

// Validate checks the limit when the command line is parsed (a usage error: exit 80).
func (c *outboxListCmd) Validate() error {
	if c.Limit < 1 {
		return fmt.Errorf("--limit %d: must be at least 1", c.Limit)
	}
	return nil
}

func (c *outboxListCmd) Run(ctx context.Context, g *Globals) error {
	return withPool(ctx, g, func(pool *pgxpool.Pool) error { return c.run(ctx, pool, os.Stdout, time.Now()) })
}

func (c *outboxListCmd) run(ctx context.Context, db outbox.Querier, w io.Writer, now time.Time) error {
	rows, err := outbox.SetAside(ctx, db, c.Limit)
	if err != nil {
		return err
	}
	if c.JSON {
		if rows == nil {
			rows = []outbox.SetAsideRow{}
		}
		return writeJSON(w, rows)
	}
	tw := table(w)
	fmt.Fprintln(tw, "ID\tTOPIC\tEVENT ID\tBYTES\tFAILURES\tERROR CLASS\tSET ASIDE\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s ago\t%s\n", r.ID, r.Topic, r.EventID, r.Bytes, r.Failures, r.ErrorClass,
			age(now.Sub(r.SetAsideAt)), r.LastError)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	more := ""
	if len(rows) == c.Limit {
		more = fmt.Sprintf("; the first %d, raise --limit for more", c.Limit)
	}
	_, err = fmt.Fprintf(w, "%d row%s set aside%s\n", len(rows), plural(len(rows)), more)
	return err
}

type outboxRetryCmd struct {
	IDs []int64 `arg:"" name:"id" help:"Outbox row ids, as bookrecon outbox list shows them."`
}

func (c *outboxRetryCmd) Run(ctx context.Context, g *Globals) error {
	return withPool(ctx, g, func(pool *pgxpool.Pool) error { return c.run(ctx, pool, os.Stdout) })
}

func (c *outboxRetryCmd) run(ctx context.Context, db outbox.Querier, w io.Writer) error {
	var errs []error
	for _, id := range c.IDs {
		if err := outbox.Retry(ctx, db, id); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(w, "row %d released: the relay publishes it on its next round\n", id)
	}
	return notSetAsideHint(errors.Join(errs...))
}

type outboxDiscardCmd struct {
	ID     int64  `arg:"" help:"Outbox row id, as bookrecon outbox list shows it."`
	Reason string `required:"" help:"Why the row is given up (kept on the row, e.g. a ticket)."`
}

// Validate refuses a blank reason when the command line is parsed (a usage error: exit 80).
func (c *outboxDiscardCmd) Validate() error {
	if strings.TrimSpace(c.Reason) == "" {
		return errors.New("--reason must not be blank")
	}
	return nil
}

func (c *outboxDiscardCmd) Run(ctx context.Context, g *Globals) error {
	return withPool(ctx, g, func(pool *pgxpool.Pool) error { return c.run(ctx, pool, os.Stdout) })
}

func (c *outboxDiscardCmd) run(ctx context.Context, db outbox.Querier, w io.Writer) error {
	if err := outbox.Discard(ctx, db, c.ID, strings.TrimSpace(c.Reason)); err != nil {
		return notSetAsideHint(err)
	}
	_, err := fmt.Fprintf(w, "row %d discarded: it will never be published; its key's later rows flow again\n", c.ID)
	return err
}

// notSetAsideHint adds what to do to an ErrNotSetAside.
func notSetAsideHint(err error) error {
	if errors.Is(err, outbox.ErrNotSetAside) {
		return fmt.Errorf("%w (bookrecon outbox list shows the rows set aside)", err)
	}
	return err
}
