package geo

import (
	"sync"
	"sync/atomic"
)

// regionCacheLimit bounds each of a cache's two generations. A full
// GeoLite2-City has more distinct records than this, but the addresses that
// reach one gateway come from far fewer places; likewise for phone numbers
// and header values.
const regionCacheLimit = 1 << 16

// regionCache maps a key (a record's offset, a phone number, a header value)
// to its Region. It keeps two generations: when the current one is full it
// becomes the previous one and the one before is dropped, so memory stays
// bounded and recently used entries survive (a hit in the previous
// generation is copied forward). It is safe for concurrent use; the Regions
// in it are never modified. A nil Names marks a key known to have no region.
type regionCache[K comparable] struct {
	limit int64
	cur   atomic.Pointer[cacheGen]
	prev  atomic.Pointer[cacheGen]
}

type cacheGen struct {
	m sync.Map // K → *Region
	n atomic.Int64
}

func newRegionCache[K comparable](limit int64) *regionCache[K] {
	c := &regionCache[K]{limit: limit}
	c.cur.Store(new(cacheGen))
	return c
}

func (c *regionCache[K]) get(key K) *Region {
	if v, ok := c.cur.Load().m.Load(key); ok {
		return v.(*Region)
	}
	if p := c.prev.Load(); p != nil {
		if v, ok := p.m.Load(key); ok {
			reg := v.(*Region)
			c.put(key, reg)
			return reg
		}
	}
	return nil
}

// put stores reg under key. A string key must not alias a request buffer:
// the caller clones it.
func (c *regionCache[K]) put(key K, reg *Region) {
	cur := c.cur.Load()
	if _, loaded := cur.m.LoadOrStore(key, reg); loaded {
		return
	}
	if cur.n.Add(1) >= c.limit && c.cur.CompareAndSwap(cur, new(cacheGen)) {
		c.prev.Store(cur)
	}
}
