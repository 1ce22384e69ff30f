package main

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// check sends n requests with random X-User-Id values through a proxy and
// reports the share that reached the gray upstream (read from the body, so
// it works for every proxy), the X-Gray-Group header values seen, non-2xx
// answers and transport errors. With -vip it also sends requests as a
// whitelisted user, who must always reach gray.
//
// It prints one line of key=value pairs that run.sh stores with the run.
func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:18080/api/x", "`URL` to request")
	n := fs.Int("n", 2000, "number of requests")
	conc := fs.Int("c", 8, "concurrent connections")
	vip := fs.String("vip", "", "a whitelisted user `ID` that must always reach gray")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := &fasthttp.Client{MaxConnsPerHost: *conc}
	var (
		mu                   sync.Mutex
		gray, non2xx, errs   int
		vipSent, vipGray     int
		headers              = map[string]int{}
		firstErr, firstNon2x string
	)
	do := func(uid string) (isGray bool, ok bool) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(*url)
		req.Header.Set("X-User-Id", uid)
		err := c.DoTimeout(req, resp, 5*time.Second)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs++
			if firstErr == "" {
				firstErr = err.Error()
			}
			return false, false
		}
		if sc := resp.StatusCode(); sc < 200 || sc > 299 {
			non2xx++
			if firstNon2x == "" {
				firstNon2x = strconv.Itoa(sc) + " " + strings.TrimSpace(string(resp.Body()))
			}
			return false, false
		}
		h := string(resp.Header.Peek("X-Gray-Group"))
		if h == "" {
			h = "-"
		}
		headers[h]++
		return bytes.HasPrefix(resp.Body(), []byte("gray\n")), true
	}
	var wg sync.WaitGroup
	per := (*n + *conc - 1) / *conc
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if g, ok := do(strconv.FormatUint(rand.Uint64N(1_000_000_000), 10)); ok && g {
					mu.Lock()
					gray++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	total := per * *conc
	if *vip != "" {
		for i := 0; i < 20; i++ {
			vipSent++
			if g, ok := do(*vip); ok && g {
				vipGray++
			}
		}
	}
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var hs []string
	for _, k := range keys {
		hs = append(hs, fmt.Sprintf("%s:%d", k, headers[k]))
	}
	line := fmt.Sprintf("n=%d non2xx=%d errors=%d gray_pct=%.1f x_gray_group=%s",
		total, non2xx, errs, 100*float64(gray)/float64(max(total-non2xx-errs, 1)), strings.Join(hs, ","))
	if *vip != "" {
		line += fmt.Sprintf(" vip_gray=%d/%d", vipGray, vipSent)
	}
	if firstErr != "" {
		line += fmt.Sprintf(" first_error=%q", firstErr)
	}
	if firstNon2x != "" {
		line += fmt.Sprintf(" first_non2xx=%q", firstNon2x)
	}
	fmt.Println(line)
	return nil
}
