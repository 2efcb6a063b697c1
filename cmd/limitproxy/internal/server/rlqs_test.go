package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestRLQSServed: [rlqs] listen opens Envoy's rate limit quota service
// on the memory store: a report is answered (a token bucket of a lease
// for the policy's bucket, ALLOW_ALL for another), the metrics count it,
// and a stream still open does not hold up the shutdown.
func TestRLQSServed(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("rlqs.toml", []byte(`[server]
listen = "127.0.0.1:0"
shutdown_timeout = "5s"
[admin]
listen = "127.0.0.1:0"
[rlqs]
listen = "127.0.0.1:0"
assignment_ttl = "3s"
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:9"]
[[policy]]
name = "login"
match = { rls_domain = "edge", descriptor = ["path=/login", "ip"] }
key = ["descriptor:ip"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "100/s"
  burst = 100
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, "", cfg, io.Discard, ready) }()
	var l listening
	select {
	case l = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	if l.RLQS == nil {
		cancel()
		t.Fatal("no RLQS address")
	}
	cc, err := grpc.NewClient(l.RLQS.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	err = st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"ip": "1", "path": "/login"}}, NumRequestsAllowed: 1, NumRequestsDenied: 40},
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"ip": "1", "path": "/other"}}, NumRequestsAllowed: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.BucketAction); n != 2 {
		t.Fatalf("%d actions: %v", n, resp)
	}
	a, b := resp.BucketAction[0].GetQuotaAssignmentAction(), resp.BucketAction[1].GetQuotaAssignmentAction()
	if a.GetRateLimitStrategy().GetTokenBucket().GetMaxTokens() != 10 || a.GetAssignmentTimeToLive().GetSeconds() != 3 {
		t.Errorf("the login bucket: %v, want 10 tokens (max_share 0.1 of 100) for 3s", a)
	}
	if b.GetRateLimitStrategy().GetTokenBucket() != nil || b.GetRateLimitStrategy().GetStrategy() == nil {
		t.Errorf("an unmatched bucket: %v, want ALLOW_ALL", b)
	}
	m, err := http.Get("http://" + l.Admin.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(m.Body)
	m.Body.Close()
	for _, want := range []string{"limitproxy_rlqs_streams 1", `limitproxy_rlqs_assignments_total{kind="token_bucket"} 1`,
		`limitproxy_rlqs_assignments_total{kind="allow_all_unmatched"} 1`, "limitproxy_rlqs_leased_units_total 10"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	start := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("shutdown took %v with a stream open", d)
	}
	if _, err := st.Recv(); err == nil {
		t.Error("the stream is still open after the shutdown")
	}
}
