package tags

import "time"

// lru is a bounded map from user id to a cached answer, evicting the least
// recently used entry when full and dropping expired entries when they are
// looked up. It is not safe for concurrent use: Redis guards it with its
// mutex. A hit neither allocates nor copies the Set.
type lru struct {
	max  int
	m    map[string]*entry
	root entry // sentinel: root.next is the most recently used
}

type entry struct {
	key        string
	set        Set
	status     Status
	expires    time.Time
	prev, next *entry
}

func newLRU(max int) *lru {
	c := &lru{max: max, m: make(map[string]*entry, min(max, 1024))}
	c.root.prev, c.root.next = &c.root, &c.root
	return c
}

func (c *lru) len() int { return len(c.m) }

// get returns the live entry for key and marks it most recently used.
func (c *lru) get(key string, now time.Time) (*entry, bool) {
	e, ok := c.m[key]
	if !ok {
		return nil, false
	}
	if !now.Before(e.expires) {
		c.remove(e)
		return nil, false
	}
	if c.root.next != e {
		c.unlink(e)
		c.pushFront(e)
	}
	return e, true
}

// put stores an answer, replacing any entry for key, and evicts the least
// recently used entries beyond max.
func (c *lru) put(key string, set Set, status Status, expires time.Time) {
	if e, ok := c.m[key]; ok {
		e.set, e.status, e.expires = set, status, expires
		c.unlink(e)
		c.pushFront(e)
		return
	}
	for len(c.m) >= c.max {
		c.remove(c.root.prev)
	}
	e := &entry{key: key, set: set, status: status, expires: expires}
	c.m[key] = e
	c.pushFront(e)
}

func (c *lru) remove(e *entry) {
	c.unlink(e)
	delete(c.m, e.key)
}

func (c *lru) unlink(e *entry) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

func (c *lru) pushFront(e *entry) {
	e.prev = &c.root
	e.next = c.root.next
	c.root.next.prev = e
	c.root.next = e
}
