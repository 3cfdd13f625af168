package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/redis"
)

func openStore(t *testing.T, rawURL string, opts *redis.Options) *redis.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redis.Open(ctx, rawURL, opts)
	if err != nil {
		t.Fatalf("Open(%s) = %v; want a Store", rawURL, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Two Stores on one server (two `fence serve` processes) share locks and data.
func TestOpen_TwoStores_ShareLocksAndData(t *testing.T) {
	servertest.SkipIfShort(t)
	ctx := context.Background()
	opts := &redis.Options{Prefix: redis.PrefixForExamples()}
	one := openStore(t, "redis://"+redis.ServerAddrForExamples(), opts)
	two := openStore(t, "redis://"+redis.ServerAddrForExamples(), opts)

	a, err := one.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.Acquire(ctx, "job", time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("Acquire through two while one holds the lock = %v; want fence.ErrNotAcquired", err)
	}
	if err := one.Put(ctx, "out", []byte("by a"), a.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := two.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatalf("Acquire through two after the release = %v", err)
	}
	defer b.Release(ctx)
	if err := two.Put(ctx, "out", []byte("by b"), b.Fence()); err != nil {
		t.Fatal(err)
	}
	err = one.Put(ctx, "out", []byte("late a"), a.Fence())
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || st.Highest != b.Token() {
		t.Fatalf("A's late Put through one = %v; want a *fence.StaleTokenError with Highest %d", err, b.Token())
	}
	it, err := one.Get(ctx, "out")
	if err != nil || string(it.Value) != "by b" {
		t.Fatalf("Get through one = %q, %v; want %q", it.Value, err, "by b")
	}
}

// The database number of the URL is used: a Store on /3 does not see /0's data.
func TestOpen_URLDatabase_Used(t *testing.T) {
	servertest.SkipIfShort(t)
	ctx := context.Background()
	prefix := redis.PrefixForExamples()
	addr := redis.ServerAddrForExamples()
	db0 := openStore(t, "redis://"+addr+"/0", &redis.Options{Prefix: prefix})
	db3 := openStore(t, "redis://"+addr+"/3", &redis.Options{Prefix: prefix})
	l, err := db3.Acquire(ctx, "l", time.Minute) // a Store's KV takes only tokens it issued
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := db3.Put(ctx, "k", []byte("in 3"), l.Fence()); err != nil {
		t.Fatal(err)
	}
	if _, err := db0.Get(ctx, "k"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get in db 0 of a key written in db 3 = %v; want fence.ErrNotFound", err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr, DB: 3})
	defer c.Close()
	if n, err := c.Exists(ctx, prefix+"{k}:kv").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS %s{k}:kv in db 3 = %d, %v; want 1", prefix, n, err)
	}
}

func TestOpen_BadURL_ErrInvalid(t *testing.T) {
	for _, raw := range []string{
		"http://127.0.0.1:6379",
		"127.0.0.1:6379",
		"redis://127.0.0.1:6379/notadb",
		"redis://:secret@127.0.0.1:6379/x",
		"redis://127.0.0.1:6379?nosuchoption=1",
		"%zz",
	} {
		_, err := redis.Open(context.Background(), raw, nil)
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Open(%q) = %v; want fence.ErrInvalid", raw, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "redis: open ") || strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) = %q; want a message starting \"redis: open \" without the password", raw, err)
		}
	}
	_, err := redis.Open(context.Background(), "redis://127.0.0.1:1", &redis.Options{Prefix: "a}"})
	if !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Open with a bad prefix = %v; want fence.ErrInvalid", err)
	}
}

// Nothing listening: ErrUnavailable, quickly, without the password in the message.
func TestOpen_Unreachable_ErrUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // a port that was just free: connections are refused
	_, err = redis.Open(context.Background(), "redis://:secret@"+addr, nil)
	if !errors.Is(err, fence.ErrUnavailable) {
		t.Fatalf("Open of a closed port = %v; want fence.ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "secret") || !strings.HasPrefix(err.Error(), "redis: open redis://:xxxxx@") {
		t.Fatalf("Open of a closed port = %q; want a message starting \"redis: open redis://:xxxxx@\", no password", err)
	}
}

// A wrong password is the server's refusal (not ErrUnavailable: retrying does not
// help, and the message does not show it); the right one opens the Store. The user
// is made with ACL SETUSER on the package's server, which keeps its default user.
func TestOpen_Password_CheckedByPing(t *testing.T) {
	servertest.SkipIfShort(t)
	ctx := context.Background()
	addr := redis.ServerAddrForExamples()
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	defer admin.Close()
	user := strings.TrimSuffix(redis.PrefixForExamples(), ":")
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">s3cret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })

	_, err := redis.Open(ctx, "redis://"+user+":wrong@"+addr, nil)
	if err == nil || errors.Is(err, fence.ErrUnavailable) || strings.Contains(err.Error(), "wrong@") {
		t.Fatalf("Open with a wrong password = %v; want the server's refusal, not ErrUnavailable, without the password", err)
	}
	s := openStore(t, "redis://"+user+":s3cret@"+addr, &redis.Options{Prefix: user + ":"})
	if _, err := s.Acquire(ctx, "l", time.Second); err != nil {
		t.Fatalf("Acquire through a Store opened with the password = %v", err)
	}
}

// After Close, every call says fence.ErrClosed; Close again returns the same.
func TestStore_Close_ErrClosed(t *testing.T) {
	servertest.SkipIfShort(t)
	ctx := context.Background()
	s, err := redis.Open(ctx, "redis://"+redis.ServerAddrForExamples(), &redis.Options{Prefix: redis.PrefixForExamples()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v; want nil", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v; want nil", err)
	}
	f := fence.Fence{Name: "l", Token: 1}
	if err := s.Put(ctx, "k", []byte("v"), f); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("Put after Close = %v; want fence.ErrClosed", err)
	}
	if err := s.Fence(ctx, "k", f); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("Fence after Close = %v; want fence.ErrClosed", err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("Get after Close = %v; want fence.ErrClosed", err)
	}
	if _, err := s.Acquire(ctx, "l", time.Second); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("Acquire after Close = %v; want fence.ErrClosed", err)
	}
}

// The main flow of a Store: locks and the fenced data in one Redis. A holder whose
// lease was taken over is refused by the data itself.
func ExampleOpen() {
	ctx := context.Background()
	store, err := redis.Open(ctx, "redis://"+redis.ServerAddrForExamples()+"/0", &redis.Options{Prefix: redis.PrefixForExamples()})
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer store.Close()

	a, _ := store.Acquire(ctx, "ledger", 30*time.Second)
	_ = store.Put(ctx, "balance", []byte("100"), a.Fence())
	_ = a.Release(ctx) // (or A pauses past its TTL)

	b, _ := store.Acquire(ctx, "ledger", 30*time.Second)
	defer b.Release(ctx)
	_ = store.Put(ctx, "balance", []byte("90"), b.Fence())

	err = store.Put(ctx, "balance", []byte("100 again"), a.Fence()) // A's late write
	fmt.Println("late write refused:", errors.Is(err, fence.ErrStaleToken))
	it, _ := store.Get(ctx, "balance")
	fmt.Printf("balance %s written with token %d\n", it.Value, it.Fence.Token)
	// Output:
	// late write refused: true
	// balance 90 written with token 2
}

// Guard.Fence lets a new holder fence off a paused predecessor before its first
// write.
func ExampleKV_Fence() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: redis.ServerAddrForExamples()})
	defer client.Close()
	kv, _ := redis.NewKV(client, &redis.Options{Prefix: redis.PrefixForExamples()})

	old := fence.Fence{Name: "report", Token: 4, LeaseID: driver.NewLeaseID()}
	next := fence.Fence{Name: "report", Token: 5, LeaseID: driver.NewLeaseID()}
	_ = kv.Fence(ctx, "report.csv", next)
	err := kv.Put(ctx, "report.csv", []byte("stale"), old)
	fmt.Println(err)
	// Output: redis: put "report.csv": fence: stale token 4 for "report.csv", highest seen 5
}
