package fence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

func TestAdmit(t *testing.T) {
	hi := fence.Fence{Name: "job", Token: 10, LeaseID: "lease-10"}
	tests := []struct {
		desc    string
		highest fence.Fence
		next    fence.Fence
		want    error // nil, *StaleTokenError or *NamespaceError, compared by value
	}{
		{"nothing accepted yet", fence.Fence{}, fence.Fence{Name: "job", Token: 1}, nil},
		{"nothing accepted yet, any name", fence.Fence{}, fence.Fence{Name: "other", Token: 3}, nil},
		{"higher token", hi, fence.Fence{Name: "job", Token: 11, LeaseID: "l11"}, nil},
		{"higher token skipping values", hi, fence.Fence{Name: "job", Token: 1000}, nil},
		{"equal token, same lease", hi, fence.Fence{Name: "job", Token: 10, LeaseID: "lease-10"}, nil},
		{"lower token", hi, fence.Fence{Name: "job", Token: 9, LeaseID: "l9"},
			&fence.StaleTokenError{Resource: "r", Token: 9, Highest: 10}},
		{"equal token, other lease", hi, fence.Fence{Name: "job", Token: 10, LeaseID: "other"},
			&fence.StaleTokenError{Resource: "r", Token: 10, Highest: 10, SameToken: true}},
		{"equal token, no lease id", hi, fence.Fence{Name: "job", Token: 10},
			&fence.StaleTokenError{Resource: "r", Token: 10, Highest: 10, SameToken: true}},
		{"equal token, both without lease id", fence.Fence{Name: "job", Token: 10}, fence.Fence{Name: "job", Token: 10},
			&fence.StaleTokenError{Resource: "r", Token: 10, Highest: 10, SameToken: true}},
		{"other namespace, higher token", hi, fence.Fence{Name: "other", Token: 99},
			&fence.NamespaceError{Resource: "r", Want: "job", Got: "other"}},
		{"other namespace, lower token: namespace reported", hi, fence.Fence{Name: "other", Token: 1},
			&fence.NamespaceError{Resource: "r", Want: "job", Got: "other"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got := fence.Admit("r", tc.highest, tc.next)
			if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", tc.want) {
				t.Fatalf("Admit(r, %+v, %+v) = %#v; want %#v", tc.highest, tc.next, got, tc.want)
			}
		})
	}
}

func TestParseToken(t *testing.T) {
	valid := map[string]fence.Token{
		"1":                1,
		"42":               42,
		"9007199254740991": fence.MaxToken,
	}
	for s, want := range valid {
		got, err := fence.ParseToken(s)
		if err != nil || got != want {
			t.Errorf("ParseToken(%q) = %d, %v; want %d, nil", s, got, err, want)
		}
	}
	invalid := []string{"", "0", "-1", "+1", " 1", "1 ", "1.0", "1e3", "0x10", "abc",
		"9007199254740992", "18446744073709551615", "18446744073709551616", strings.Repeat("9", 100)}
	for _, s := range invalid {
		got, err := fence.ParseToken(s)
		var ie *fence.InvalidError
		if !errors.Is(err, fence.ErrInvalid) || !errors.As(err, &ie) || ie.Field != "token" {
			t.Errorf("ParseToken(%q) = %d, %v; want an *InvalidError for field \"token\"", s, got, err)
		}
		if got != 0 {
			t.Errorf("ParseToken(%q) returned token %d with its error; want 0", s, got)
		}
	}
}

func TestToken_String(t *testing.T) {
	if got := fence.MaxToken.String(); got != "9007199254740991" {
		t.Fatalf("MaxToken.String() = %q; want %q", got, "9007199254740991")
	}
	if fence.MaxToken != 1<<53-1 {
		t.Fatalf("MaxToken = %d; want 2^53-1", fence.MaxToken)
	}
}

func TestFence_String_OmitsLeaseID(t *testing.T) {
	f := fence.Fence{Name: "job", Token: 5, LeaseID: "secret-lease"}
	if got := f.String(); got != "job#5" {
		t.Fatalf("String() = %q; want %q", got, "job#5")
	}
}

func TestFence_Validate(t *testing.T) {
	good := []fence.Fence{
		{Name: "job", Token: 1},
		{Name: "job", Token: fence.MaxToken, LeaseID: driver.NewLeaseID()},
	}
	for _, f := range good {
		if err := f.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v; want nil", f, err)
		}
	}
	bad := []struct {
		f     fence.Fence
		field string
	}{
		{fence.Fence{Name: "", Token: 1}, "name"},
		{fence.Fence{Name: "job", Token: 0}, "token"},
		{fence.Fence{Name: "job", Token: fence.MaxToken + 1}, "token"},
		{fence.Fence{Name: "job", Token: 1, LeaseID: "has space"}, "lease"},
	}
	for _, b := range bad {
		err := b.f.Validate()
		var ie *fence.InvalidError
		if !errors.As(err, &ie) || ie.Field != b.field {
			t.Errorf("%+v.Validate() = %v; want an *InvalidError for field %q", b.f, err, b.field)
		}
	}
}

func TestValidateName(t *testing.T) {
	good := []string{"a", "job/42", "with space", "ünïcødé-锁", strings.Repeat("n", fence.MaxNameLen)}
	for _, n := range good {
		if err := fence.ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v; want nil", n, err)
		}
	}
	bad := []string{"", strings.Repeat("n", fence.MaxNameLen+1), "\xff", "a\nb", "a\x00", "a\tb", "\x7f", "a\u0085b"}
	for _, n := range bad {
		err := fence.ValidateName(n)
		var ie *fence.InvalidError
		if !errors.As(err, &ie) || ie.Field != "name" || !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("ValidateName(%q) = %v; want an *InvalidError for field \"name\" matching ErrInvalid", n, err)
		}
	}
	var ie *fence.InvalidError
	if err := fence.ValidateKey(""); !errors.As(err, &ie) || ie.Field != "key" {
		t.Errorf("ValidateKey(\"\") = %v; want an *InvalidError for field \"key\"", err)
	}
}

func TestValidateTTL(t *testing.T) {
	for _, ttl := range []time.Duration{fence.MinTTL, time.Second, 1500 * time.Millisecond, fence.MaxTTL} {
		if err := fence.ValidateTTL(ttl); err != nil {
			t.Errorf("ValidateTTL(%v) = %v; want nil", ttl, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second, 999 * time.Microsecond, 1500 * time.Microsecond, fence.MaxTTL + time.Millisecond} {
		var ie *fence.InvalidError
		if err := fence.ValidateTTL(ttl); !errors.As(err, &ie) || ie.Field != "ttl" {
			t.Errorf("ValidateTTL(%v) = %v; want an *InvalidError for field \"ttl\"", ttl, err)
		}
	}
}

func TestValidateToken(t *testing.T) {
	for _, tok := range []fence.Token{1, 2, fence.MaxToken} {
		if err := fence.ValidateToken(tok); err != nil {
			t.Errorf("ValidateToken(%d) = %v; want nil", tok, err)
		}
	}
	for _, tok := range []fence.Token{0, fence.MaxToken + 1, 1<<64 - 1} {
		if err := fence.ValidateToken(tok); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("ValidateToken(%d) = %v; want ErrInvalid", tok, err)
		}
	}
}

func TestValidateLeaseID(t *testing.T) {
	for _, id := range []string{"a", "!", "~", strings.Repeat("x", fence.MaxLeaseIDLen), driver.NewLeaseID()} {
		if err := fence.ValidateLeaseID(id); err != nil {
			t.Errorf("ValidateLeaseID(%q) = %v; want nil", id, err)
		}
	}
	for _, id := range []string{"", " ", "a b", "a\tb", "\x7f", "ü", strings.Repeat("x", fence.MaxLeaseIDLen+1)} {
		var ie *fence.InvalidError
		if err := fence.ValidateLeaseID(id); !errors.As(err, &ie) || ie.Field != "lease" {
			t.Errorf("ValidateLeaseID(%q) = %v; want an *InvalidError for field \"lease\"", id, err)
		}
	}
}

func TestNewLeaseID_128RandomBitsDistinct(t *testing.T) {
	seen := make(map[string]bool)
	for i := 0; i < 1000; i++ {
		id := driver.NewLeaseID()
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("NewLeaseID() = %q; want 32 lowercase hex digits (128 bits)", id)
		}
		if seen[id] {
			t.Fatalf("NewLeaseID() returned %q twice in 1000 calls", id)
		}
		seen[id] = true
	}
}

func TestErrors_IsAndAs(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("backend: op %q: %w", "job", err) }
	type check struct {
		err     error
		is      error
		isNot   []error
		asCheck func(error) bool
		inMsg   []string
	}
	checks := map[string]check{
		"StaleTokenError": {
			err: wrap(&fence.StaleTokenError{Resource: "r", Token: 3, Highest: 9}), is: fence.ErrStaleToken,
			isNot: []error{fence.ErrNamespace, fence.ErrInvalid, fence.ErrNotHeld},
			asCheck: func(e error) bool {
				var x *fence.StaleTokenError
				return errors.As(e, &x) && x.Highest == 9 && x.Token == 3
			},
			inMsg: []string{"stale token 3", `"r"`, "highest seen 9"},
		},
		"StaleTokenError same token": {
			err: wrap(&fence.StaleTokenError{Resource: "r", Token: 9, Highest: 9, SameToken: true}), is: fence.ErrStaleToken,
			asCheck: func(e error) bool { var x *fence.StaleTokenError; return errors.As(e, &x) && x.SameToken },
			inMsg:   []string{"another lease"},
		},
		"NamespaceError": {
			err: wrap(&fence.NamespaceError{Resource: "r", Want: "a", Got: "b"}), is: fence.ErrNamespace,
			isNot: []error{fence.ErrStaleToken},
			asCheck: func(e error) bool {
				var x *fence.NamespaceError
				return errors.As(e, &x) && x.Want == "a" && x.Got == "b"
			},
			inMsg: []string{`"a"`, `"b"`},
		},
		"InvalidError": {
			err: wrap(fence.ValidateName("")), is: fence.ErrInvalid,
			isNot:   []error{fence.ErrNotFound},
			asCheck: func(e error) bool { var x *fence.InvalidError; return errors.As(e, &x) && x.Field == "name" },
			inMsg:   []string{"invalid name", "is empty"},
		},
		"HeldError": {
			err: wrap(&fence.HeldError{Name: "job", ExpiresIn: 1500 * time.Millisecond}), is: fence.ErrNotAcquired,
			isNot: []error{fence.ErrNotHeld},
			asCheck: func(e error) bool {
				var x *fence.HeldError
				return errors.As(e, &x) && x.ExpiresIn == 1500*time.Millisecond
			},
			inMsg: []string{`"job"`, "expires in 1.5s"},
		},
		"HeldError of a semaphore": {
			err: wrap(&fence.HeldError{Name: "pool", ExpiresIn: time.Second, Limit: 3}), is: fence.ErrNotAcquired,
			asCheck: func(e error) bool { var x *fence.HeldError; return errors.As(e, &x) && x.Limit == 3 },
			inMsg:   []string{`"pool"`, "all 3 permits held, the first expires in 1s"},
		},
		"LimitError": {
			err: wrap(&fence.LimitError{Name: "pool", Limit: 5, Held: 3}), is: fence.ErrInvalid,
			isNot:   []error{fence.ErrNotAcquired},
			asCheck: func(e error) bool { var x *fence.LimitError; return errors.As(e, &x) && x.Limit == 5 && x.Held == 3 },
			inMsg:   []string{`"pool" is held with limit 3, not 5`},
		},
		"ErrReleased": {err: wrap(fence.ErrReleased), is: fence.ErrNotHeld, isNot: []error{fence.ErrExpired}, inMsg: []string{"released"}},
		"ErrExpired":  {err: wrap(fence.ErrExpired), is: fence.ErrNotHeld, isNot: []error{fence.ErrReleased}, inMsg: []string{"expired"}},
	}
	for name, c := range checks {
		t.Run(name, func(t *testing.T) {
			if !errors.Is(c.err, c.is) {
				t.Errorf("errors.Is(%v, %v) = false; want true", c.err, c.is)
			}
			for _, n := range c.isNot {
				if errors.Is(c.err, n) {
					t.Errorf("errors.Is(%v, %v) = true; want false", c.err, n)
				}
			}
			if c.asCheck != nil && !c.asCheck(c.err) {
				t.Errorf("errors.As on %v did not find the typed error with its fields", c.err)
			}
			for _, s := range c.inMsg {
				if !strings.Contains(c.err.Error(), s) {
					t.Errorf("message %q does not contain %q", c.err.Error(), s)
				}
			}
		})
	}
}

func TestInvalidError_TruncatesLongValues(t *testing.T) {
	err := fence.ValidateName(strings.Repeat("n", 300))
	msg := err.Error()
	if strings.Contains(msg, strings.Repeat("n", 65)) || !strings.Contains(msg, strings.Repeat("n", 64)+"...") {
		t.Fatalf("message %q; want the value cut to 64 bytes and \"...\"", msg)
	}
}

func TestHeldError_UnknownExpiry(t *testing.T) {
	if got, want := (&fence.HeldError{Name: "job"}).Error(), `fence: lock "job" not acquired: held`; got != want {
		t.Fatalf("Error() = %q; want %q", got, want)
	}
}

func TestLockInfo_Equal_ComparesHolders(t *testing.T) {
	a := fence.LockInfo{Name: "s", Held: true, Token: 2, Limit: 2, Holders: []fence.Holder{{Slot: 0, Token: 1}, {Slot: 1, Token: 2}}}
	b := a
	b.Holders = slices.Clone(a.Holders)
	if !a.Equal(b) {
		t.Fatalf("%+v.Equal(a copy) = false", a)
	}
	b.Holders[1].Owner = "x"
	if a.Equal(b) {
		t.Fatalf("Equal ignored a holder's owner")
	}
	if a.Equal(fence.LockInfo{Name: "s", Held: true, Token: 2, Limit: 2}) {
		t.Fatalf("Equal ignored the holders")
	}
}

func TestApplyAcquireOptions(t *testing.T) {
	if got := driver.ApplyOptions(); got != (driver.AcquireOptions{}) {
		t.Errorf("no options = %+v; want zero (try once, no auto-renew)", got)
	}
	got := driver.ApplyOptions(fence.WithWait(time.Second), nil, fence.WithAutoRenew())
	if want := (driver.AcquireOptions{Wait: time.Second, AutoRenew: true}); got != want {
		t.Errorf("WithWait(1s), nil, WithAutoRenew() = %+v; want %+v", got, want)
	}
	if got := driver.ApplyOptions(fence.WithWait(-time.Second)); got.Wait != 0 {
		t.Errorf("WithWait(-1s).Wait = %v; want 0", got.Wait)
	}
}

// recordingLocker records the options Acquire received and the values Heal got.
type recordingLocker struct {
	fakeLocker
	opts   driver.AcquireOptions
	healed []fence.Token
}

func (r *recordingLocker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	r.opts = driver.ApplyOptions(opts...)
	return nil, &fence.HeldError{Name: name}
}

func (r *recordingLocker) Heal(ctx context.Context, name string, seen fence.Token) error {
	r.healed = append(r.healed, seen)
	return nil
}

func TestTryAcquire_OverridesWait(t *testing.T) {
	r := &recordingLocker{}
	_, err := fence.TryAcquire(context.Background(), r, "job", time.Second, fence.WithWait(time.Minute), fence.WithAutoRenew())
	if !errors.Is(err, fence.ErrNotAcquired) {
		t.Fatalf("TryAcquire = %v; want the locker's ErrNotAcquired", err)
	}
	if r.opts.Wait != 0 || !r.opts.AutoRenew {
		t.Fatalf("options seen by Acquire = %+v; want Wait 0 (try once) and AutoRenew kept", r.opts)
	}
}

func TestHeal_ReportsHighestOnlyForStaleErrors(t *testing.T) {
	ctx := context.Background()
	r := &recordingLocker{}
	stale := fmt.Errorf("guard: put: %w", &fence.StaleTokenError{Resource: "r", Token: 3, Highest: 42})
	if err := fence.Heal(ctx, r, "job", stale); err != nil {
		t.Fatalf("Heal = %v; want nil", err)
	}
	for _, other := range []error{nil, fence.ErrNotHeld, &fence.NamespaceError{Want: "a", Got: "b"}} {
		if err := fence.Heal(ctx, r, "job", other); err != nil {
			t.Fatalf("Heal(%v) = %v; want nil", other, err)
		}
	}
	if len(r.healed) != 1 || r.healed[0] != 42 {
		t.Fatalf("Healer got %v; want [42] (only the stale error's Highest)", r.healed)
	}
	// A Locker that is no Healer: nothing to do.
	if err := fence.Heal(ctx, &fakeLocker{}, "job", stale); err != nil {
		t.Fatalf("Heal on a non-Healer = %v; want nil", err)
	}
}
