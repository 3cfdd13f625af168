package mysql_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/mysql"
)

func TestKV_PutGetFence(t *testing.T) {
	kv := mysql.NewKV(db(t), nil)
	ctx := context.Background()
	k := resource(t)
	if _, err := kv.Get(ctx, k); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get of a new key: want fence.ErrNotFound, got %v", err)
	}
	if err := kv.Fence(ctx, k, fenceOf("l", 2, "a")); err != nil {
		t.Fatal(err)
	}
	it, err := kv.Get(ctx, k)
	if err != nil || it.Value != nil || it.Fence != fenceOf("l", 2, "a") {
		t.Fatalf("Get of a fenced key: want nil value, fence l#2 a, got %q %+v %v", it.Value, it.Fence, err)
	}
	wantStale(t, kv.Put(ctx, k, []byte("zombie"), fenceOf("l", 1, "z")), 2, false)
	if err := kv.Put(ctx, k, []byte("v1"), fenceOf("l", 2, "a")); err != nil {
		t.Fatal(err)
	}
	if it, err := kv.Get(ctx, k); err != nil || !bytes.Equal(it.Value, []byte("v1")) {
		t.Fatalf("want v1, got %q %v", it.Value, err)
	}
	if err := kv.Put(ctx, k, make([]byte, mysql.MaxValueLen+1), fenceOf("l", 3, "b")); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("oversized value: want fence.ErrInvalid, got %v", err)
	}
}
