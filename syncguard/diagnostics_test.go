package syncguard

import (
	"context"
	"testing"
	"time"
)

func TestDiagnostics(t *testing.T) {
	f := NewFakeBackend()
	ctx := context.Background()
	a, _ := f.Acquire(ctx, "order:7", time.Minute)

	info, err := GetByKey(ctx, f, "order:7")
	if err != nil || info == nil || info.KeyHash != HashKey("order:7") || info.LockIDHash != HashKey(a.LockID) || info.Fence != a.Fence {
		t.Fatalf("GetByKey: sanitized info of the live lock; got %+v %v", info, err)
	}
	if byID, err := GetByID(ctx, f, a.LockID); err != nil || byID == nil || *byID != *info {
		t.Fatalf("GetByID: same info as by key; got %+v %v", byID, err)
	}
	raw, err := GetByKeyRaw(ctx, f, "order:7")
	if err != nil || raw == nil || raw.Key != "order:7" || raw.LockID != a.LockID || raw.LockInfo != *info {
		t.Fatalf("GetByKeyRaw: raw key and lockId plus the sanitized fields; got %+v %v", raw, err)
	}
	if raw, err := GetByIDRaw(ctx, f, a.LockID); err != nil || raw == nil || raw.Key != "order:7" {
		t.Fatalf("GetByIDRaw: %+v %v", raw, err)
	}
	if ok, err := Owns(ctx, f, a.LockID); !ok || err != nil {
		t.Fatalf("Owns of the holder: %v %v", ok, err)
	}

	_, _ = f.Release(ctx, a.LockID)
	if ok, err := Owns(ctx, f, a.LockID); ok || err != nil {
		t.Fatalf("Owns after release: %v %v", ok, err)
	}
	if info, err := GetByKey(ctx, f, "order:7"); info != nil || err != nil {
		t.Fatalf("GetByKey of a free key is nil: %+v %v", info, err)
	}
	if raw, err := GetByIDRaw(ctx, f, a.LockID); raw != nil || err != nil {
		t.Fatalf("GetByIDRaw of a released lock is nil: %+v %v", raw, err)
	}
	_, err = Owns(ctx, f, "not-a-lock-id")
	requireCode(t, err, CodeInvalidArgument)
}
