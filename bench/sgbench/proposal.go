package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// ProposedAcquireSQL is syncguard's acquire.sql with one change, measured
// here (flag -proposals) as evidence for a core change: the fence counter is
// bumped only if its latest committed value is still the one this
// statement's snapshot saw (snapf). An attempt whose snapshot predates a
// rival's commit (it saw the key free, the rival then committed and released
// the advisory lock before this attempt tried it) then stops at the counter:
// it burns no fence, and its ins step never runs, so it does not lock the
// winner's fresh lock row and delay the winner's release. It still locks the
// counter row (ON CONFLICT DO UPDATE locks the row even when its WHERE
// fails), which is one small WAL record and a commit flush. fence_exhausted
// is reported only when the snapshot's counter is at the maximum.
// %[1]s is the lock table, %[2]s the fence table.
const ProposedAcquireSQL = `WITH
t AS (
  SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint AS now_ms
),
cur AS (
  SELECT l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
  FROM %[1]s AS l, t
  WHERE l."key" = $1::text AND l."expires_at_ms" > t.now_ms - 1000
),
free AS (
  SELECT t.now_ms FROM t
  WHERE CASE WHEN EXISTS (SELECT 1 FROM cur) THEN false
             ELSE pg_try_advisory_xact_lock(hashtext($1::text)) END
),
snapf AS (
  SELECT c."fence" FROM %[2]s AS c WHERE c."fence_key" = $3::text
),
f AS (
  INSERT INTO %[2]s AS c ("fence_key", "fence", "key_debug")
  SELECT $3::text, 1, $4::text FROM free
  ON CONFLICT ("fence_key") DO UPDATE SET "fence" = c."fence" + 1
  WHERE c."fence" < 900000000000000 AND c."fence" = (SELECT "fence" FROM snapf)
  RETURNING c."fence"
),
ins AS (
  INSERT INTO %[1]s AS l ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
  SELECT $1::text, $2::text, free.now_ms + $5::bigint, free.now_ms, lpad(f."fence"::text, 15, '0'), $4::text
  FROM free, f
  ON CONFLICT ("key") DO UPDATE SET
    "lock_id" = EXCLUDED."lock_id",
    "expires_at_ms" = EXCLUDED."expires_at_ms",
    "acquired_at_ms" = EXCLUDED."acquired_at_ms",
    "fence" = EXCLUDED."fence",
    "user_key" = EXCLUDED."user_key"
  WHERE l."expires_at_ms" <= EXCLUDED."acquired_at_ms" - 1000
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
)
SELECT
  COALESCE(ins."lock_id", cur."lock_id") AS lock_id,
  COALESCE(ins."expires_at_ms", cur."expires_at_ms") AS expires_at_ms,
  COALESCE(ins."acquired_at_ms", cur."acquired_at_ms") AS acquired_at_ms,
  COALESCE(ins."fence", cur."fence") AS fence,
  (EXISTS (SELECT 1 FROM free) AND NOT EXISTS (SELECT 1 FROM f)
   AND COALESCE((SELECT "fence" FROM snapf), 0) >= 900000000000000) AS fence_exhausted
FROM t
LEFT JOIN ins ON true
LEFT JOIN cur ON true`

// Proposed is syncguard with ProposedAcquireSQL and ProposedReleaseSQL, on
// syncguard's benchmark tables; extend and reads are syncguard's own.
type Proposed struct {
	sg       *SG
	acq, rel *sql.Stmt
}

// NewProposed prepares the proposed statements. which is "both",
// "acquire" or "release": the operation not proposed is syncguard's own.
func NewProposed(ctx context.Context, db *sql.DB, sg *SG, which string) (*Proposed, error) {
	p := &Proposed{sg: sg}
	var err error
	if which == "both" || which == "acquire" {
		if p.acq, err = db.PrepareContext(ctx, fmt.Sprintf(ProposedAcquireSQL, quoteIdent(SGTable), quoteIdent(SGFenceTable))); err != nil {
			return nil, fmt.Errorf("proposed acquire: %w", err)
		}
	}
	if which == "both" || which == "release" {
		if p.rel, err = db.PrepareContext(ctx, fmt.Sprintf(ProposedReleaseSQL, quoteIdent(SGTable))); err != nil {
			p.Close()
			return nil, fmt.Errorf("proposed release: %w", err)
		}
	}
	if p.acq == nil && p.rel == nil {
		return nil, fmt.Errorf("proposals: want both, acquire or release, got %q", which)
	}
	return p, nil
}

// Close closes the statements.
func (p *Proposed) Close() {
	for _, s := range []*sql.Stmt{p.acq, p.rel} {
		if s != nil {
			s.Close()
		}
	}
}

func (p *Proposed) Acquire(ctx context.Context, key string, ttl time.Duration) (string, bool, error) {
	if p.acq == nil {
		return p.sg.Acquire(ctx, key, ttl)
	}
	norm, err := syncguard.NormalizeKey(key)
	if err != nil {
		return "", false, err
	}
	storage, fenceKey, err := syncguard.StorageKeys(norm)
	if err != nil {
		return "", false, err
	}
	id := syncguard.GenerateLockID()
	var (
		gotID, fence      sql.NullString
		expires, acquired sql.NullInt64
		exhausted         bool
	)
	if err := p.acq.QueryRowContext(ctx, storage, id, fenceKey, norm, ttl.Milliseconds()).Scan(&gotID, &expires, &acquired, &fence, &exhausted); err != nil {
		return "", false, err
	}
	if exhausted {
		return "", false, fmt.Errorf("proposed acquire: fence exhausted")
	}
	return id, gotID.Valid && gotID.String == id, nil
}

func (p *Proposed) Release(ctx context.Context, id string) (bool, error) {
	if p.rel == nil {
		return p.sg.Release(ctx, id)
	}
	if err := syncguard.ValidateLockID(id); err != nil {
		return false, err
	}
	var (
		deleted sql.NullString
		seen    sql.NullInt64
		now     int64
	)
	if err := p.rel.QueryRowContext(ctx, id).Scan(&deleted, &seen, &now); err != nil {
		return false, err
	}
	return deleted.Valid && deleted.String == id, nil
}

func (p *Proposed) Extend(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	return p.sg.Extend(ctx, id, ttl)
}

func (p *Proposed) Read(ctx context.Context, key, id string) error { return p.sg.Read(ctx, key, id) }
