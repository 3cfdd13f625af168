package fencehttp

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the HTTP wire's own Prometheus series, beside the service's
// (package service) on the same registry. Names are part of the contract of
// `fence serve` (dashboards rely on them).
type metrics struct {
	requests *prometheus.CounterVec // labels route, code
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fence_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
	}
	reg.MustRegister(m.requests)
	return m
}
