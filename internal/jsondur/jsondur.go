// Package jsondur is the duration type of graygate's JSON and YAML
// settings: a time.Duration written as a Go duration string ("500ms",
// "30s"), never as a bare number, whose meaning (nanoseconds? seconds?)
// an operator could not tell from the file. The config, upstream, breaker
// and tags packages all name it Duration.
package jsondur

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration written in JSON as a Go duration string.
type Duration time.Duration

// UnmarshalJSON parses a non-negative Go duration string. null leaves d as
// it is, as encoding/json does for other types.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf(`expected a duration string such as "500ms" or "30s", got %s`, b)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf(`expected a non-negative duration such as "500ms" or "30s", got %q`, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// String returns the duration as time.Duration formats it.
func (d Duration) String() string { return time.Duration(d).String() }

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }
