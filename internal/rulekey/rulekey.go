// Package rulekey defines the form of a rule key, which the rule decoder,
// the admin API and every store check alike. It is its own package so that
// package rule can check keys without importing the stores.
package rulekey

// Pattern is the documented form of a rule key (Valid), for error messages.
const Pattern = `^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`

// Valid reports whether key matches Pattern. It is written out instead of
// using regexp because stores run it on every call. Keys never hold a
// slash, so they can be used as path or etcd key segments unescaped.
func Valid(key string) bool {
	if len(key) == 0 || len(key) > 128 {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}
