package etcdstore

import (
	"testing"
)

// FuzzInstanceWatch: the registry's keys and values are written by every
// service that registers (or by hand): whatever they hold, a put or
// delete never panics, and what the watch keeps is only instances with an
// address and a weight >= 0, filed under the service their key names.
func FuzzInstanceWatch(f *testing.F) {
	f.Add([]byte("/gg/instances/users/10.0.0.1%3A80"), []byte(`{"addr":"10.0.0.1:80","weight":2,"metadata":{"version":"2"}}`), false)
	f.Add([]byte("/gg/instances/users/x"), []byte(`{"addr":"","weight":-1}`), false)
	f.Add([]byte("/gg/instances/users/x"), []byte(`null`), true)
	f.Add([]byte("/gg/instances//x"), []byte(`{"addr":"h:1"}`), false)
	f.Add([]byte("/other/instances/u/x"), []byte(`{"addr":"h:1"}`), false)
	f.Fuzz(func(t *testing.T, key, value []byte, del bool) {
		w := &instanceWatch{dir: "/gg/instances/", current: map[string]map[string]Instance{}}
		s := w.put(key, value)
		if del {
			w.del(key)
		}
		for svc, insts := range w.current {
			if svc != s || len(insts) == 0 {
				t.Fatalf("key %q filed under %q (put returned %q), %d instances", key, svc, s, len(insts))
			}
			for k, inst := range insts {
				if k != string(key) || inst.Addr == "" || inst.Weight < 0 {
					t.Fatalf("kept %q: %+v", k, inst)
				}
			}
		}
	})
}
