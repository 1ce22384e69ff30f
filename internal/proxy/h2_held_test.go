package proxy

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/graygate/graygate/internal/listener"
)

// TestH2ConcurrentHeldBodies is TestPipeliningHeldBodies for the HTTP/2
// listener: many streams at once on one connection, each a POST whose
// body the gateway holds for the stable fallback of a gray decision, of
// 0 to 40,000 bytes, with or without a content-length, and with or
// without an X-T trailer field. Each answer must name the pool that
// served it and the body and field it got: gray when the gray instance is
// up, stable, with the same body and field, when it refuses connections.
// To an http1 and an h2c pool, through the real listener, with Go's
// HTTP/2 client.
func TestH2ConcurrentHeldBodies(t *testing.T) {
	for _, gw := range grayWithFallback(t, listener.Protocols{H2C: true}) {
		client := h2cClient(t)
		rng := rand.New(rand.NewPCG(19, uint64(gw.proto)))
		var wg sync.WaitGroup
		for i := range 64 {
			size := rng.IntN(40001)
			declared, trailer := rng.IntN(2) == 0, rng.IntN(3) > 0
			wg.Go(func() {
				if err := heldStream(client, gw.addr, i, size, declared, trailer, gw.serves); err != nil {
					t.Errorf("%s: %v", gw.name, err)
				}
			})
		}
		wg.Wait()
	}
}

// TestH2ConcurrentMirrored: the same concurrent streams, held for a
// mirror (a stable decision whose copies go to a candidate). Every copy
// the candidate gets is the request the primary got: its path, body and
// X-T trailer field. To an http1 and an h2c pool.
func TestH2ConcurrentMirrored(t *testing.T) {
	copies := make(chan string, 256)
	for _, gw := range mirroredGateways(t, listener.Protocols{H2C: true}, copies) {
		proto, addr := gw.proto, gw.addr
		client := h2cClient(t)
		rng := rand.New(rand.NewPCG(23, uint64(proto)))
		var wg sync.WaitGroup
		var mu sync.Mutex
		sent := make(map[string]string)
		for i := range 64 {
			size := rng.IntN(40001)
			declared, trailer := rng.IntN(2) == 0, rng.IntN(3) > 0
			wg.Go(func() {
				if err := heldStream(client, addr, i, size, declared, trailer, "stable"); err != nil {
					t.Errorf("%s pool: %v", proto, err)
				}
				xt := ""
				if trailer {
					xt = fmt.Sprintf("t%d", i)
				}
				mu.Lock()
				sent[fmt.Sprintf("/s%d", i)] = string(bytes.Repeat([]byte{byte('a' + i%26)}, size)) + " " + xt
				mu.Unlock()
			})
		}
		wg.Wait()
		copiesMatch(t, proto.String()+" pool", gw.set, gw.rule, sent, copies)
	}
}

// heldStream sends stream i, a POST of size bytes (with a content-length
// if declared, and an X-T trailer field if trailer), and checks its
// answer from bodyTrailerUpstream named serves.
func heldStream(client *http.Client, addr string, i, size int, declared, trailer bool, serves string) error {
	path := fmt.Sprintf("/s%d", i)
	body := bytes.Repeat([]byte{byte('a' + i%26)}, size)
	var src io.Reader = bytes.NewReader(body)
	if !declared {
		src = io.MultiReader(src) // of unknown length: no content-length
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, src)
	if err != nil {
		return err
	}
	xt := ""
	if trailer {
		xt = fmt.Sprintf("t%d", i)
		req.Trailer = http.Header{"X-T": {xt}}
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s (%d bytes, declared %v, trailer %v): %w", path, size, declared, trailer, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	want := strings.Join([]string{serves, path, string(body), xt}, " ")
	if err != nil || resp.StatusCode != http.StatusOK || string(got) != want {
		return fmt.Errorf("%s (%d bytes, declared %v, trailer %v): %d, %d bytes %.60q (%v); want 200 %.60q",
			path, size, declared, trailer, resp.StatusCode, len(got), got, err, want)
	}
	return nil
}
