package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// TestMetricHeaderNeverReachesClients: the header an upstream reports an
// experiment's revenue in is stripped from every answer, not only from
// those of requests the experiment claimed. POST /api/orders/ is outside
// the checkout rule's path_prefix (/api/order/), so the default upstream
// answers it unclaimed, and the same backend reports the amount; the
// client never sees the figure, pipelined (pipeline checks every answer)
// or not.
func TestMetricHeaderNeverReachesClients(t *testing.T) {
	e, _, _ := startShop(t, "")
	pipeline(t, e, []preq{
		{method: "POST", path: "/api/orders/new", uid: "u1", hdr: []string{"X-Order-Amount", "12.50"}, status: 201},
		{method: "POST", path: "/api/order/new", uid: "u1", hdr: []string{"X-Order-Amount", "7"}, status: 201},
	}, 1)
	req, _ := http.NewRequest("POST", e.data+"/api/orders/new", strings.NewReader(""))
	req.Header.Set("X-User-Id", "u2")
	req.Header.Set("X-Order-Amount", "3")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || resp.Header.Get("X-Gray-Rule") != "" || resp.Header.Get("X-Gray-Metric-Revenue") != "" {
		t.Errorf("unclaimed order: %d, rule %q, revenue header %q; want 201 from the default upstream without the header",
			resp.StatusCode, resp.Header.Get("X-Gray-Rule"), resp.Header.Get("X-Gray-Metric-Revenue"))
	}
}
