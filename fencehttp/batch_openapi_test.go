package fencehttp_test

import (
	"strings"
	"testing"

	"github.com/fencelock/fence/driver"
)

// exerciseBatch drives POST /v1/batch into every answer the document gives it.
func exerciseBatch(t *testing.T, c *checker, s *servers) {
	t.Helper()
	secret := driver.NewLeaseID()
	ops := `[{"op":"acquire","name":"batched","ttl_ms":60000,"owner":"w1"},{"op":"renew","name":"batched","lease":"` + secret + `","ttl_ms":1000},{"op":"release","name":"batched","lease":"` + secret + `"}]`
	c.do(exchange{what: "batch", on: s.authOK, method: "POST", path: "/v1/batch", body: ops, status: 200})
	c.do(exchange{what: "batch, token out of scope", on: s.scoped, method: "POST", path: "/v1/batch", body: ops, status: 200})
	c.do(exchange{what: "batch, store closed", on: s.closed, method: "POST", path: "/v1/batch", body: ops, status: 200})
	c.do(exchange{what: "batch with a waiting acquire", on: s.authOK, method: "POST", path: "/v1/batch", body: `[{"op":"acquire","name":"x","wait_ms":5}]`, req: reqViolates, status: 200})
	c.do(exchange{what: "batch with an unknown op", on: s.authOK, method: "POST", path: "/v1/batch", body: `[{"op":"revoke","name":"x"}]`, req: reqViolates, status: 200})
	c.do(exchange{what: "batch, not an array", on: s.authOK, method: "POST", path: "/v1/batch", body: `{"op":"acquire","name":"x"}`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "batch, empty", on: s.authOK, method: "POST", path: "/v1/batch", body: `[]`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "batch, too many operations", on: s.authOK, method: "POST", path: "/v1/batch",
		body: "[" + strings.TrimSuffix(strings.Repeat(`{"op":"release","name":"x","lease":"`+secret+`"},`, 129), ",") + "]", req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "batch, body too large", on: s.main, method: "POST", path: "/v1/batch", body: "[" + strings.Repeat(" ", 300) + "]", req: reqUnchecked, status: 413, code: "too_large"})
	c.do(exchange{what: "batch, no token", on: s.auth, method: "POST", path: "/v1/batch", body: ops, req: reqViolates, status: 401, code: "unauthorized"})
}
