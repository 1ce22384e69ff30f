package etcdstore

import (
	"bytes"
	"encoding/json"

	"github.com/graygate/graygate/internal/store"
)

// validKey is store.ValidKey: keys never hold a slash, which is what
// lets them be used as etcd key segments unescaped.
var validKey = store.ValidKey

// marshal encodes v as compact JSON without HTML escaping, so that a rule's
// bytes read back exactly as the file store returns them ("<" stays "<").
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func cloneEntry(e store.Entry) store.Entry {
	e.Rule = bytes.Clone(e.Rule)
	return e
}
