//go:build !linux

package listener

import (
	"errors"
	"fmt"
	"syscall"
)

// reusePortControl refuses: SO_REUSEPORT exists on the BSDs and macOS, but
// without Linux's spreading of connections over the sockets, which the
// restart procedure relies on.
func reusePortControl(network, address string, c syscall.RawConn) error {
	return fmt.Errorf("SO_REUSEPORT handover is only supported on Linux: %w", errors.ErrUnsupported)
}
