package assembler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

const watermarkName = "assembler"

// writingName marks how far a pass may have written rows (markWriting).
const writingName = "assembler-writing"

// progress returns the watermark (the epoch before the first pass) and
// whether a pass that began writing past it did not save it: it failed or
// its node died between its first insert and its watermark.
func (a *Assembler) progress(ctx context.Context) (wm time.Time, unfinished bool, err error) {
	rows, err := a.PG.Pool.Query(ctx, "SELECT name, watermark FROM assembly_watermarks WHERE name = ANY($1)", []string{watermarkName, writingName})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read assembler watermark: %w", err)
	}
	var saved, writing int64
	var name string
	var ns int64
	_, err = pgx.ForEachRow(rows, []any{&name, &ns}, func() error {
		if name == watermarkName {
			saved = ns
		} else {
			writing = ns
		}
		return nil
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read assembler watermark: %w", err)
	}
	return time.Unix(0, saved).UTC(), writing > saved, nil
}

// markWriting records, before a pass's first insert, that rows up to upper
// may be written: if the pass does not save its watermark, the passes after
// it read the existing rows of every trace, fresh ones too, instead of
// writing them twice (the rollups would count them twice). The mark only
// rises: a later pass may be smaller than the one cut short (its budget,
// its window), and lowering the mark would hide rows written past it.
func (a *Assembler) markWriting(ctx context.Context, upper time.Time) error {
	return a.saveMark(ctx, writingName, upper, "GREATEST(assembly_watermarks.watermark, EXCLUDED.watermark)")
}

// Watermark is how far assembly has come, whichever node ran it: every
// span inserted up to it is in llm_requests. ok is false before the first
// pass.
func (a *Assembler) Watermark(ctx context.Context) (wm time.Time, ok bool, err error) {
	var ns int64
	err = a.PG.Pool.QueryRow(ctx, "SELECT watermark FROM assembly_watermarks WHERE name = $1", watermarkName).Scan(&ns)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read assembler watermark: %w", err)
	}
	return time.Unix(0, ns).UTC(), true, nil
}

func (a *Assembler) setWatermark(ctx context.Context, t time.Time) error {
	return a.saveMark(ctx, watermarkName, t, "EXCLUDED.watermark")
}

// saveMark stores t under name in assembly_watermarks; an existing value
// becomes update (SQL over the old and the EXCLUDED row).
func (a *Assembler) saveMark(ctx context.Context, name string, t time.Time, update string) error {
	_, err := a.PG.Pool.Exec(ctx, `INSERT INTO assembly_watermarks (name, watermark, updated_at) VALUES ($1, $2, now())
		ON CONFLICT (name) DO UPDATE SET watermark = `+update+`, updated_at = now()`, name, t.UnixNano())
	if err != nil {
		return fmt.Errorf("save %s watermark: %w", name, err)
	}
	return nil
}
