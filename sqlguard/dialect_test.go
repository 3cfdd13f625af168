package sqlguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/fencelock/fence"
)

var errDriverBusy = errors.New("driver: busy")

// testDialect has only the parts Wrap and QuoteIdent use; the SQL parts are
// exercised against real databases by the mysql and sqlite tests.
func testDialect() *Dialect { return testD }

var testD = &Dialect{
	Name: "testdb",
	Translate: func(err error) error {
		if errors.Is(err, errDriverBusy) {
			return ErrConflict
		}
		return nil
	},
	Quote:       `"`,
	IdentRE:     regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`),
	IdentReason: "bad identifier",
}

// testDB is testD as a type.
type testDB struct{}

func (testDB) SQL() *Dialect { return testD }

func TestDialect_Wrap_TranslatesAndKeepsCause(t *testing.T) {
	d := testDialect()
	if err := d.Wrap("x", nil); err != nil {
		t.Fatalf("Wrap(nil): want nil, got %v", err)
	}
	cases := []struct {
		name string
		in   error
		want error
	}{
		{"driver error the dialect knows", fmt.Errorf("exec: %w", errDriverBusy), ErrConflict},
		{"finished transaction", sql.ErrTxDone, fence.ErrClosed},
		{"closed connection", sql.ErrConnDone, fence.ErrClosed},
		{"canceled context", context.Canceled, context.Canceled},
		{"stale token", &fence.StaleTokenError{Highest: 3}, fence.ErrStaleToken},
	}
	for _, c := range cases {
		got := d.Wrap("fence \"r\"", c.in)
		if !errors.Is(got, c.want) || !errors.Is(got, c.in) {
			t.Errorf("%s: want an error matching %v and %v, got %v", c.name, c.want, c.in, got)
		}
		if !strings.HasPrefix(got.Error(), `testdb: fence "r": `) {
			t.Errorf("%s: want the prefix %q, got %q", c.name, `testdb: fence "r": `, got.Error())
		}
	}
	plain := errors.New("something else")
	if got := d.Wrap("x", plain); got.Error() != "testdb: x: something else" || !errors.Is(got, plain) {
		t.Errorf("unknown error: want %q wrapping it, got %v", "testdb: x: something else", got)
	}
}

func TestDialect_QuoteIdent(t *testing.T) {
	d := testDialect()
	for in, want := range map[string]string{"t": `"t"`, "main.fences": `"main"."fences"`} {
		if got, err := d.quoteIdent(in); err != nil || got != want {
			t.Errorf("QuoteIdent(%q): want %s, got %s, %v", in, want, got, err)
		}
	}
	for _, in := range []string{"", "a.b.c", `x"; DROP TABLE y; --`, "1abc", strings.Repeat("a", 65)} {
		if got, err := d.quoteIdent(in); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("QuoteIdent(%q): want fence.ErrInvalid, got %q, %v", in, got, err)
		}
	}
}

func TestNewGuard_NilDBAndBadTable_ErrInvalidFromEveryMethod(t *testing.T) {
	ctx := context.Background()
	for name, g := range map[string]*Guard[testDB]{
		"nil db":    NewGuard[testDB](nil, nil),
		"bad table": NewGuard[testDB](&sql.DB{}, &GuardOptions{Table: "a b"}),
	} {
		if err := g.Fence(ctx, "r", fence.Fence{Name: "l", Token: 1, LeaseID: "a"}); !errors.Is(err, fence.ErrInvalid) || !strings.HasPrefix(err.Error(), "testdb: new guard: ") {
			t.Errorf("%s: Fence: want fence.ErrInvalid prefixed %q, got %v", name, "testdb: new guard: ", err)
		}
		if _, err := g.Highest(ctx, "r"); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: Highest: want fence.ErrInvalid, got %v", name, err)
		}
		if err := g.CreateSchema(ctx); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: CreateSchema: want fence.ErrInvalid, got %v", name, err)
		}
	}
}
